"""Events with real ``manage.py procedures_worker`` processes on PostgreSQL.

A procedure waiting for an event holds no worker thread or lease: an event sent
while the worker idles wakes it through LISTEN/NOTIFY (the workers here poll
and sweep only every :data:`RARELY` seconds, so neither is what wakes it), and
the next step runs with the event; a worker killed while a procedure waits
leaves nothing for a lease to expire. Waiting is a poll of the database with a
generous deadline.
"""

from __future__ import annotations

import signal

import pytest

from django_procedures import send_event
from django_procedures.models import Lease, ProcedureRun
from testproject.testapp.procedures import Approval, ThreeSteps
from tests.runtime.processes import Workers, wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

RARELY = 600.0
QUIET = {"POLL_SECONDS": RARELY, "SWEEP_SECONDS": RARELY, "STATS_SECONDS": RARELY, "LISTEN_NOTIFY": True}
WAIT = 120
#: The worker's other chores wake its loop every 60 s: an event run later than this was not woken by its NOTIFY.
BEFORE_ANY_CHORE = 50


def row(pid) -> ProcedureRun:
    return ProcedureRun.objects.get(id=pid)


def start(workers: Workers):
    return workers.start("--concurrency", "1", lease_seconds=10.0, procedures=QUIET)


def test_an_event_sent_while_the_worker_idles_wakes_it_and_the_next_step_runs(workers):
    worker = start(workers)
    approval = Approval.submit({"names": ["approved"]})
    wait_for(lambda: row(approval.id).status == "waiting", timeout=WAIT, workers=workers, what="the wait")
    assert approval.refresh().waiting_for == "event"
    other = ThreeSteps.submit()  # the worker's one thread is free: the wait does not hold it
    wait_for(lambda: row(other.id).status == "done", timeout=WAIT, workers=workers, what="other work")

    assert send_event(approval, "approved", {"by": "ann"}).delivered
    wait_for(lambda: row(approval.id).status == "done", timeout=BEFORE_ANY_CHORE, workers=workers,
             what="the event to wake the idle worker (no poll, no sweep)")
    done = row(approval.id)
    assert done.output["first"]["payload"] == {"by": "ann"}
    assert (done.attempt, done.lost) == (1, 0)
    assert list(Lease.objects.filter(procedure_id=approval.id).values_list("outcome", flat=True)) == [
        "completed", "completed"]  # one lease before the wait, one after
    worker.signal(signal.SIGTERM)
    assert worker.wait(WAIT) == 0
    assert worker.final_count("waited") == 1  # the stats line counts the claim that began the wait


def test_a_worker_killed_while_a_procedure_waits_leaves_it_to_another(workers):
    victim = start(workers)
    approval = Approval.submit({"names": ["approved"]})
    wait_for(lambda: row(approval.id).status == "waiting", timeout=WAIT, workers=workers, what="the wait")
    victim.signal(signal.SIGKILL)
    victim.wait(WAIT)
    send_event(approval, "approved", "while no worker runs")  # kept on the row: nothing in any worker's memory
    start(workers)
    wait_for(lambda: row(approval.id).status == "done", timeout=WAIT, workers=workers, what="another worker")
    done = row(approval.id)
    assert done.output["first"]["payload"] == "while no worker runs"
    assert (done.attempt, done.lost) == (1, 0)  # the wait held no lease: nothing expired, no attempt lost


def test_a_wait_times_out_at_its_wake_time_on_an_idle_worker(workers):
    start(workers)
    approval = Approval.submit({"names": ["approved"], "timeout": 2})
    wait_for(lambda: row(approval.id).status == "waiting", timeout=WAIT, workers=workers, what="the wait")
    wake_at = approval.refresh().wake_at
    assert wake_at is not None
    wait_for(lambda: row(approval.id).status == "done", timeout=BEFORE_ANY_CHORE, workers=workers,
             what="the timeout to wake the idle worker (no poll, no sweep)")
    done = row(approval.id)
    assert done.output == {"first": None, "second": None}
    from datetime import datetime

    assert datetime.fromisoformat(done.state["decided_at"]) >= wake_at
