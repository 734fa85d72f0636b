"""The worker registry with real ``procedures_worker`` processes: alive, stopped (and why), gone after kill -9."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from django_procedures.admin.workers import running_by_worker
from django_procedures.models import Worker
from django_procedures.policy.workers import WorkerState
from testproject.testapp.procedures import ThreeSteps
from tests.runtime.processes import Workers, read_pid, wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

FAST = {"SWEEP_SECONDS": 0.5}


def row_of(worker_id: str) -> Worker | None:
    return Worker.objects.with_state().filter(worker_id=worker_id).order_by("-id").first()


def state_of(worker_id: str) -> str | None:
    row = row_of(worker_id)
    return None if row is None else row.state


def wait_state(worker_id: str, state: str, *, workers: Workers, timeout: float = 60) -> Worker:
    wait_for(lambda: state_of(worker_id) == state, timeout=timeout, workers=workers,
             what=f"worker {worker_id} to be {state} (it is {state_of(worker_id)})")
    return row_of(worker_id)


def test_sigterm_stops_the_row_with_its_reason_and_shows_what_it_ran(workers, tmp_path):
    marker = tmp_path / "m"
    handle = ThreeSteps.submit({"marker": str(marker), "sleep": {"two": 300}, "poll": True})
    a = workers.start("--concurrency", "2", "--queues", "default,other", lease_seconds=1.5, procedures=FAST)
    row = wait_state(a.worker_id, WorkerState.ALIVE, workers=workers)
    assert (row.pid, row.concurrency, row.queues, row.lease_seconds, row.stopped_at) == (
        a.pid, 2, ["default", "other"], 1.5, None)
    assert row.version  # the installed package's version

    wait_for(lambda: read_pid(Path(f"{marker}.two")) == a.pid, timeout=30, workers=workers, what="step two")
    running = running_by_worker([a.worker_id])[a.worker_id]
    assert [(r["id"], r["step_name"]) for r in running] == [(handle.id, "two")]

    # Renewed with the heartbeat (every lease / 3 = 0.5 s): last_seen_at moves on while it is alive.
    first_seen = row.last_seen_at
    wait_for(lambda: row_of(a.worker_id).last_seen_at > first_seen, timeout=30, workers=workers,
             what="last_seen_at to be renewed")

    a.signal(signal.SIGTERM)
    assert a.wait(30) == 0
    row = row_of(a.worker_id)
    assert (row.state, row.stop_reason, row.stop_detail) == (WorkerState.STOPPED, "sigterm", "")
    assert row.stopped_at >= row.started_at
    assert running_by_worker([a.worker_id]) == {}  # its procedure was released


def test_kill_9_leaves_stopped_at_empty_and_shows_gone_after_the_renewal_window(workers):
    a = workers.start(lease_seconds=1.5, procedures=FAST)
    wait_state(a.worker_id, WorkerState.ALIVE, workers=workers)
    a.kill_now()
    row = wait_state(a.worker_id, WorkerState.GONE, workers=workers)
    assert (row.stopped_at, row.stop_reason) == (None, "")
    assert not Worker.objects.alive().filter(worker_id=a.worker_id).exists()
    assert Worker.objects.gone().filter(worker_id=a.worker_id).count() == 1


def test_burst_records_that_it_drained(workers):
    handle = ThreeSteps.submit({})
    a = workers.start("--burst", lease_seconds=3, procedures=FAST)
    assert a.wait(60) == 0
    assert handle.refresh().status == "done"
    row = row_of(a.worker_id)
    assert (row.state, row.stop_reason, row.get_stop_reason_display()) == (WorkerState.STOPPED, "burst",
                                                                            "drained (--burst)")


def test_each_start_is_its_own_row(workers):
    for _ in range(2):
        w = workers.start("--burst", lease_seconds=3, procedures=FAST, name="same")
        assert w.wait(60) == 0
    rows = list(Worker.objects.filter(worker_id="same").order_by("id").values_list("stop_reason", flat=True))
    assert rows == ["burst", "burst"]


def test_a_worker_records_whether_it_ticks_and_one_that_does_not_warns_when_nothing_does(workers):
    from datetime import timedelta

    from django_celery_beat.models import PeriodicTask

    from django_procedures import register_schedule
    from django_procedures.checks import check_schedules_ticked
    from django_procedures.store import schedules
    from testproject.testapp.procedures import Heartbeat

    PeriodicTask.objects.all().delete()  # no Celery beat entry
    register_schedule("hourly", Heartbeat, period=timedelta(hours=1))
    plain = workers.start(lease_seconds=3, procedures=FAST)
    assert not wait_state(plain.worker_id, WorkerState.ALIVE, workers=workers).with_scheduler
    (line,) = plain.log_lines(level="WARNING", containing="nothing ticks them")
    assert "this worker runs without --with-scheduler" in line
    assert [m.id for m in check_schedules_ticked(databases=["default"])] == ["django_procedures.W004"]

    ticking = workers.start("--with-scheduler", lease_seconds=3, procedures=FAST)
    assert wait_state(ticking.worker_id, WorkerState.ALIVE, workers=workers).with_scheduler
    assert check_schedules_ticked(databases=["default"]) == []
    schedules.pause("hourly")
    for worker in (plain, ticking):
        worker.signal(signal.SIGTERM)
        assert worker.wait(60) == 0
