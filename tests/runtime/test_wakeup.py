"""Idle workers wake on NOTIFY for their queues, on local events, and poll after reconnecting."""

import threading

import pytest
from django.db import connection

from django_procedures.runtime.wakeup import Waker
from testproject.testapp.procedures import ThreeSteps

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def waker():
    w = Waker(listen=True, queues=["mail"], poll_seconds=30)
    yield w
    w.close()


def test_listen_wakes_on_a_committed_submit_to_its_queue(waker):
    assert waker.wait(30) is True  # the first wait connects, and a fresh connection polls once
    assert waker.wait(0.2) is False
    ThreeSteps.submit(queue="mail")
    assert waker.wait(30) is True


def test_other_queues_do_not_wake_it(waker):
    waker.wait(30)
    ThreeSteps.submit(queue="billing")
    assert waker.wait(0.5) is False


def test_an_uncommitted_submit_does_not_wake_it(waker):
    from django.db import transaction

    waker.wait(30)
    with transaction.atomic():
        ThreeSteps.submit(queue="mail")
        assert waker.wait(0.3) is False
    assert waker.wait(30) is True


def test_wake_from_another_thread(waker):
    waker.wait(30)
    threading.Timer(0.1, waker.wake).start()
    assert waker.wait(30) is True


def test_a_dropped_listen_connection_reconnects_and_polls_once(waker):
    waker.wait(30)
    pid = waker._conn.info.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    assert waker.wait(30) is True  # the broken connection is noticed
    assert waker.wait(30) is True  # reconnected: poll once
    assert waker._conn.info.backend_pid != pid
    ThreeSteps.submit(queue="mail")
    assert waker.wait(30) is True


def test_without_listen_it_polls():
    w = Waker(listen=False, queues=None, poll_seconds=0.1)
    try:
        assert w.wait(30) is False  # returned after the poll interval, not 30 s
    finally:
        w.close()
