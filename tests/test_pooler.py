"""PROCEDURES["POOLER"] and ["LISTEN_DATABASE"]: the checks, where LISTEN goes, and session settings.

The same behaviour with real worker processes behind a real PgBouncer is in
tests/runtime/test_pgbouncer_processes.py.
"""

import threading

import pytest
from django.db import connection, connections, transaction
from django.test import override_settings

from django_procedures.checks import check_settings
from django_procedures.runtime.connections import configure_connection, set_transaction_timeout
from django_procedures.store.listening import listen_params, listens

POOLED = {"POOLER": "pgbouncer-transaction", "PREPARED_STATEMENTS": False}


def pooler_findings():
    return [(e.id.rsplit(".", 1)[1], e) for e in check_settings() if e.id.split(".")[1] in
            ("E017", "E018", "W002", "W003")]


def codes():
    return [code for code, _ in pooler_findings()]


def test_no_pooler_no_findings():
    assert codes() == []


@override_settings(PROCEDURES={"POOLER": "pgbouncer"})
def test_an_unknown_pooler_is_an_error_that_names_the_known_one():
    ((code, error),) = pooler_findings()
    assert code == "E017" and "'pgbouncer-transaction'" in error.msg and "'pgbouncer'" in error.msg


@override_settings(PROCEDURES={**POOLED, "LISTEN_DATABASE": "direct"})
def test_listen_database_must_be_an_alias():
    ((code, error),) = pooler_findings()
    assert code == "E018" and "'direct'" in error.msg and "'default'" in error.hint


def test_listen_database_must_be_postgresql(monkeypatch):
    from django.conf import settings

    monkeypatch.setitem(settings.DATABASES, "direct", {"ENGINE": "django.db.backends.sqlite3", "NAME": "x"})
    with override_settings(PROCEDURES={**POOLED, "LISTEN_DATABASE": "direct"}):
        ((code, error),) = pooler_findings()
    assert code == "E018" and "not PostgreSQL" in error.msg


@override_settings(PROCEDURES=POOLED)
def test_listen_notify_through_the_pooler_without_a_direct_alias_warns():
    ((code, warning),) = pooler_findings()
    assert code == "W002" and "LISTEN_DATABASE" in warning.hint and "LISTEN_NOTIFY" in warning.hint
    assert not listens()  # and it polls rather than LISTEN where no NOTIFY arrives


@pytest.mark.parametrize("fix", [{"LISTEN_NOTIFY": False},
                                 pytest.param({"LISTEN_DATABASE": "default"}, marks=pytest.mark.postgres)])
def test_polling_or_a_direct_alias_silences_the_warning(fix):
    with override_settings(PROCEDURES={**POOLED, **fix}):
        assert codes() == []


@override_settings(PROCEDURES={"POOLER": "pgbouncer-transaction", "LISTEN_NOTIFY": False})
def test_prepared_statements_through_the_pooler_warn():
    ((code, warning),) = pooler_findings()
    assert code == "W003" and "PREPARED_STATEMENTS" in warning.hint and "1.21" in warning.hint


@pytest.mark.postgres
def test_listen_connections_open_on_the_listen_database(monkeypatch, settings):
    monkeypatch.setitem(connections.settings, "direct", {**connections.settings["default"], "NAME": "elsewhere"})
    settings.PROCEDURES = {**POOLED, "LISTEN_DATABASE": "direct"}
    assert listens()
    assert listen_params("procedures-worker/listen/w1")["dbname"] == "elsewhere"
    assert listen_params("procedures-worker/listen/w1")["application_name"] == "procedures-worker/listen/w1"


@pytest.mark.postgres
def test_handle_wait_does_not_listen_through_the_pooler(settings):
    import uuid

    from django_procedures.store.awaiting import finish_listen_params

    settings.PROCEDURES = POOLED
    assert finish_listen_params(uuid.uuid4()) is None
    settings.PROCEDURES = {**POOLED, "LISTEN_DATABASE": "default"}
    assert finish_listen_params(uuid.uuid4()) is not None


def _idle_timeout() -> str:
    return _idle_timeout_of(connection)


def _idle_timeout_of(wrapper) -> str:
    with wrapper.cursor() as cursor:
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        return cursor.fetchone()[0]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_behind_the_pooler_the_idle_timeout_is_set_per_transaction_not_per_session(settings):
    connection.close()
    settings.PROCEDURES = POOLED
    try:
        configure_connection(connection=connection, idle_timeout=90.0, own_idle_timeout=90.0)
        assert _idle_timeout() == "0"  # nothing for the session: the pooler's next client would inherit it
        with transaction.atomic():
            set_transaction_timeout(connection)
            assert _idle_timeout() == "90s"
        assert _idle_timeout() == "0"
    finally:
        connection.close()
        connection.procedures_idle_timeout_ms = None  # the wrapper outlives the test: later tests run no SET


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_direct_connection_keeps_the_idle_timeout_for_its_session():
    connection.close()
    try:
        configure_connection(connection=connection, idle_timeout=90.0, own_idle_timeout=90.0)
        assert _idle_timeout() == "90s"
        with transaction.atomic():
            set_transaction_timeout(connection)  # nothing to do
        assert _idle_timeout() == "90s"
    finally:
        connection.close()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_only_the_connections_that_run_steps_wait_the_long_idle_timeout():
    seen = {}

    def read() -> None:
        from django.db import connection as own  # this thread's

        try:
            configure_connection(connection=own, idle_timeout=600.0, own_idle_timeout=4.0)
            seen[threading.current_thread().name] = _idle_timeout_of(own)
        finally:
            own.close()

    for name in ("procedures-exec-0", "procedures-heartbeat", "MainThread-of-no-worker"):
        thread = threading.Thread(target=read, name=name)
        thread.start()
        thread.join()
    assert seen == {"procedures-exec-0": "10min", "procedures-heartbeat": "4s", "MainThread-of-no-worker": "4s"}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_process_that_cannot_listen_does_not_notify(settings):
    import psycopg

    from django_procedures.store.notify import CHANNEL, notify

    with psycopg.connect(**listen_params(), autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        settings.PROCEDURES = POOLED  # no LISTEN_DATABASE: nobody can listen, so nothing is sent
        notify(["unheard"])
        settings.PROCEDURES = {**POOLED, "LISTEN_DATABASE": "default"}
        notify(["heard"])  # after the first, in commit order: the first notification to arrive, if it was sent
        first = next(listener.notifies(timeout=60, stop_after=1))
    assert first.payload == "heard"
