"""``procedures_worker --with-scheduler`` in real worker processes (PostgreSQL): the embedded ticker.

A worker started with ``--with-scheduler`` runs a scheduling pass every ``TICK_SECONDS`` besides
running procedures. The tests pause their schedules before stopping the workers, so every run has
ended when the books are checked: every tick a schedule handled is a run, a pending tick or a skip,
and no (schedule, tick_at) pair has two runs however many workers tick at once.
"""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest
from django.db.models import Count

from django_procedures import register_schedule
from django_procedures.models import Lease, ProcedureRun, Schedule
from django_procedures.store import schedules as schedule_ops
from testproject.testapp.procedures import Heartbeat
from tests.runtime.processes import Workers, wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

SECOND = timedelta(seconds=1)
#: Seconds to wait for anything that is only a matter of time (a loaded machine may be slow).
WAIT = 120


def done_runs(schedule: Schedule) -> int:
    return ProcedureRun.objects.filter(schedule=schedule, status="done").count()


def pause_and_settle(names: list[str], workers: Workers) -> None:
    """Pause the schedules and wait until none of their runs holds a slot (every run has ended)."""
    for name in names:
        schedule_ops.pause(name, reason="test over")
    wait_for(lambda: not Schedule.objects.filter(name__in=names, active_runs__gt=0).exists(), timeout=WAIT,
             what="the paused schedules' last runs to end", workers=workers)


def assert_books_balance(schedule: Schedule, first_tick) -> None:
    """Every handled tick is a run, a pending tick or a skip; each tick has one run, and every run is done."""
    schedule.refresh_from_db()
    runs = list(ProcedureRun.objects.filter(schedule=schedule).values_list("tick_at", "status"))
    ticks = [t for t, _ in runs]
    assert len(ticks) == len(set(ticks)), f"{schedule.name}: a tick started twice"
    assert {status for _, status in runs} == {"done"}, runs
    assert all((t - first_tick) % schedule.period == timedelta(0) for t in ticks), "runs stand for cadence ticks"
    handled = (schedule.next_tick_at - first_tick) // schedule.period
    assert handled == len(runs) + len(schedule.pending_ticks) + schedule.skips, schedule.snapshot()
    snapshot = schedule.snapshot()
    assert (snapshot["runs"], snapshot["failures"], snapshot["active_runs"]) == (len(runs), 0, 0)
    assert snapshot["max_elapsed_ms"] is not None and snapshot["last_drift_ms"] is not None


def test_a_worker_with_scheduler_runs_a_one_second_schedule(workers):
    schedule, _ = register_schedule("every-second", Heartbeat, period=SECOND)
    first_tick = schedule.next_tick_at
    worker = workers.start("--with-scheduler", "--concurrency", "2", lease_seconds=30,
                           procedures={"TICK_SECONDS": 0.25})
    wait_for(lambda: done_runs(schedule) >= 3, timeout=WAIT, what="three runs of the 1 s schedule", workers=workers)
    pause_and_settle([schedule.name], workers)
    worker.signal(signal.SIGTERM)
    assert worker.wait(WAIT) == 0, worker.describe()

    assert_books_balance(schedule, first_tick)
    # (The schedule was due at once, maybe more than a second before the worker was up: ticks missed while it
    # started are skips, which the books above count.)
    assert not worker.log_lines(level="ERROR") and "Traceback" not in worker.log()


def test_two_workers_with_scheduler_never_start_a_tick_twice(workers):
    names = [f"race-{i}" for i in range(8)]
    made = [register_schedule(name, Heartbeat, period=SECOND)[0] for name in names[:6]]
    made.append(register_schedule(names[6], Heartbeat, period=SECOND, missed="catch_up", max_pending=3)[0])
    made.append(register_schedule(names[7], Heartbeat, mode="fixed_rate_overlap", max_concurrency=2,
                                  period=SECOND, missed="coalesce_latest")[0])
    first = {s.id: s.next_tick_at for s in made}
    fast = {"TICK_SECONDS": 0.05}  # twenty passes a second each: the two workers race for every tick
    pair = [workers.start("--with-scheduler", "--concurrency", "2", lease_seconds=30, procedures=fast)
            for _ in range(2)]
    def ran_scheduled() -> set[str]:
        return set(Lease.objects.filter(procedure__schedule__isnull=False).values_list("worker", flat=True))

    # Both workers run scheduled runs, too (one that started late on a busy machine may take a while to).
    wait_for(lambda: all(done_runs(s) >= 3 for s in made) and ran_scheduled() == {w.worker_id for w in pair},
             timeout=WAIT, what="three runs of every schedule, run by both workers", workers=workers)
    pause_and_settle(names, workers)
    for worker in pair:
        worker.signal(signal.SIGTERM)
    for worker in pair:
        assert worker.wait(WAIT) == 0, worker.describe()

    duplicates = (ProcedureRun.objects.filter(schedule__isnull=False).values("schedule_id", "tick_at")
                  .annotate(n=Count("id")).filter(n__gt=1))
    assert not duplicates.exists()
    for s in made:
        assert_books_balance(s, first[s.id])
    for worker in pair:
        assert not worker.log_lines(level="ERROR") and "Traceback" not in worker.log(), worker.describe()


def test_burst_with_scheduler_waits_for_a_tick_due_within_the_burst_wait(workers):
    """--burst exits once nothing is due within BURST_WAIT_SECONDS; with --with-scheduler a schedule's
    next tick counts as something due: the worker waits for it, runs what it starts, then exits."""
    schedule, _ = register_schedule("soon", Heartbeat, period=timedelta(hours=1), initial_delay=1.5 * SECOND)
    w = workers.start("--burst", "--with-scheduler", lease_seconds=30)
    assert w.wait(WAIT) == 0
    assert done_runs(schedule) == 1, w.describe()  # the next tick is an hour away: it did not wait for that


def test_burst_with_scheduler_does_not_wait_for_a_tick_beyond_the_burst_wait(workers):
    # (Due far beyond the burst wait, however long the worker takes to start on a busy machine.)
    schedule, _ = register_schedule("later", Heartbeat, period=timedelta(hours=1), initial_delay=30 * 60 * SECOND)
    w = workers.start("--burst", "--with-scheduler", lease_seconds=30)
    assert w.wait(WAIT) == 0
    assert done_runs(schedule) == 0
