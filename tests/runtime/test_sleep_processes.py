"""Durable sleep with real ``manage.py procedures_worker`` processes on PostgreSQL.

A sleeping procedure holds no worker thread, lease or connection: the one
thread of a worker runs other work while it sleeps, and a worker killed with
SIGKILL while it sleeps leaves nothing behind for a lease to expire (another
worker wakes it, no attempt lost). The wake-up comes from the worker's idle
wait ending at the next due time, which includes wake times: the workers here
poll and sweep only every :data:`RARELY` seconds, so neither is what wakes it.
Waiting is always a poll of the database with a generous deadline.
"""

from __future__ import annotations

import signal
from datetime import datetime

import pytest

from django_procedures.models import Lease, ProcedureRun, Step
from testproject.testapp.procedures import Sleeper, ThreeSteps
from tests.runtime.processes import Workers, wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

#: The workers' poll and sweep interval: far longer than any wait of these tests.
RARELY = 600.0
QUIET = {"POLL_SECONDS": RARELY, "SWEEP_SECONDS": RARELY, "STATS_SECONDS": RARELY, "LISTEN_NOTIFY": True}
WAIT = 120
#: The worker's other chores (retention, the activity count) wake its loop every 60 s; a sleeper woken by one of
#: them, not by its own due time, would come later than this (generous for a 2 s sleep on a loaded machine).
BEFORE_ANY_CHORE = 50


def row(pid) -> ProcedureRun:
    return ProcedureRun.objects.get(id=pid)


def start(workers: Workers, *, threads: int = 1):
    return workers.start("--concurrency", str(threads), lease_seconds=10.0, procedures=QUIET)


def test_a_sleeper_is_woken_at_its_wake_time_and_holds_no_thread_meanwhile(workers):
    start(workers)
    sleeper = Sleeper.submit({"seconds": 2})
    wait_for(lambda: row(sleeper.id).status == "waiting", timeout=WAIT, workers=workers, what="the sleep")
    wake_at = sleeper.refresh().wake_at
    assert sleeper.waiting_for == "timer" and wake_at is not None
    other = ThreeSteps.submit()  # the worker's one thread is free: the sleeper does not hold it
    wait_for(lambda: row(other.id).status == "done", timeout=WAIT, workers=workers, what="other work")
    wait_for(lambda: row(sleeper.id).status == "done", timeout=BEFORE_ANY_CHORE, workers=workers,
             what="the sleeper to wake and finish (no poll, no sweep)")
    done = row(sleeper.id)
    assert datetime.fromisoformat(done.state["woke_at"]) >= wake_at
    assert (done.attempt, done.failures, done.lost, done.waiting_for, done.wake_at) == (1, 0, 0, "", None)
    assert list(Lease.objects.filter(procedure_id=sleeper.id).order_by("token").values_list("outcome", flat=True)) \
        == ["completed", "completed"]  # one lease before the sleep, one after


def test_a_worker_killed_while_a_procedure_sleeps_leaves_it_to_another(workers):
    victim = start(workers)
    sleeper = Sleeper.submit({"seconds": 3})
    wait_for(lambda: row(sleeper.id).status == "waiting", timeout=WAIT, workers=workers, what="the sleep")
    victim.signal(signal.SIGKILL)
    victim.wait(WAIT)
    start(workers)
    wait_for(lambda: row(sleeper.id).status == "done", timeout=WAIT, workers=workers, what="another worker")
    done = row(sleeper.id)
    assert (done.attempt, done.lost) == (1, 0)  # the sleep held no lease: nothing expired, no attempt lost
    assert list(Step.objects.filter(procedure_id=sleeper.id).order_by("index").values_list("name", "attempt",
                                                                                            "status")) == [
        ("before", 1, "done"), ("after", 1, "done")]
    assert set(Lease.objects.filter(procedure_id=sleeper.id).values_list("outcome", flat=True)) == {"completed"}
