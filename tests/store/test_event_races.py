"""No lost wake-up between a send and a wait's settle (PostgreSQL, two connections).

Both lock the procedure's row before they look at its events, so one commits
wholly before the other reads. The interleavings are forced with row locks, as
in test_final_races: the test's transaction holds either the procedure's row
(a send not committed yet) or the claim's lease row (a wait's settle that has
checked for events and written ``waiting``, not committed yet).
"""

from __future__ import annotations

import pytest
from django.db import transaction

from django_procedures import send_event
from django_procedures.models import Event, Lease, ProcedureRun
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store.claim import claim
from django_procedures.testing import drain
from testproject.testapp.procedures import Approval
from tests.store.test_final_races import InThread, wait_blocked

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def claimed_approval():
    handle = Approval.submit({"names": ["approved"]})
    (held,) = claim("w", type_names=[Approval.type_name], lease_seconds=60)
    return handle, held


def test_a_send_committing_while_the_wait_settles_is_taken_by_the_wait():
    handle, held = claimed_approval()
    with transaction.atomic():
        sent = send_event(handle, "approved", "sent first")  # holds the procedure's row until the commit
        assert not sent.delivered  # it is running: the event is kept
        settling = InThread(lambda: execute(RunningClaim(held)))
        wait_blocked(1, "the wait's settle to block on the procedure's row")
    assert settling.join() == "waited"
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.status, run.waiting_for) == ("ready", "")  # the wait took the event: it never waited
    assert Event.objects.get().consumed_by == "decide"
    drain()
    assert ProcedureRun.objects.get(id=handle.id).output["first"]["payload"] == "sent first"


def test_a_send_arriving_while_the_wait_commits_wakes_the_waiting_procedure():
    handle, held = claimed_approval()
    with transaction.atomic():
        # The settle has locked the row, found no event, written `waiting`; it blocks on its lease row (held here).
        Lease.objects.select_for_update().get(procedure_id=held.id, token=held.lease_token)
        settling = InThread(lambda: execute(RunningClaim(held)))
        wait_blocked(1, "the wait's settle to block on its lease row, `waiting` written")
        sending = InThread(lambda: send_event(handle.id, "approved", "sent second"))
        wait_blocked(2, "the send to wait behind the settle for the procedure's row")
    assert settling.join() == "waited"
    assert sending.join().delivered  # it saw the committed wait, and made the procedure ready
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.status, run.waiting_for, run.waiting_events) == ("ready", "", None)
    drain()
    assert ProcedureRun.objects.get(id=handle.id).output["first"]["payload"] == "sent second"


def test_a_timeout_pass_meeting_a_send_leaves_the_procedure_to_the_send():
    from datetime import timedelta

    from django_procedures import clock
    from django_procedures.store import timers

    handle = Approval.submit({"names": ["approved"], "timeout": 0.0})
    (held,) = claim("w", type_names=[Approval.type_name], lease_seconds=60)
    assert execute(RunningClaim(held)) == "waited"
    with transaction.atomic():
        assert send_event(handle, "approved", "on time").delivered  # holds the row: the wake pass skips it
        assert InThread(lambda: timers.wake_due(clock.now() + timedelta(seconds=1))).join() == 0
    drain()
    assert ProcedureRun.objects.get(id=handle.id).output["first"]["payload"] == "on time"
