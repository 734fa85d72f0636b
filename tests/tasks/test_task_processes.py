"""ProceduresBackend with real ``procedures_worker`` processes on PostgreSQL.

Each test commits its data (``transaction=True``) so worker subprocesses see it;
results are read in this process, which is never the one that ran the task.
"""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest
from django.utils import timezone

from django_procedures.models import Lease, ProcedureRun, Worker
from django_procedures.tasks.compat import TaskResultStatus, task_backends
from testproject.testapp import extra_tasks, tasks
from testproject.testapp.models import Effect
from tests.runtime.processes import read_pid, wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

#: Workers here sweep expired leases often, so a 2 s lease is reclaimed within ~2.5 s.
FAST = {"SWEEP_SECONDS": 0.5}


def result_of(result_id):
    return task_backends["default"].get_result(result_id)


def wait_finished(result, *, timeout: float, workers) -> None:
    def finished():
        result.refresh()
        return result.is_finished

    wait_for(finished, timeout=timeout, workers=workers, what=f"task {result.id} to finish (it is {result.status})")


def test_workers_run_tasks_and_any_process_reads_the_results(workers):
    added = tasks.add.enqueue(2, 3)
    later = tasks.async_add.enqueue(40, 2)
    retried = tasks.flaky.enqueue(succeed_on=2)
    email = tasks.send_email.enqueue("a@example.com")
    a = workers.start("--queues", "default", "--concurrency", "2", procedures=FAST)
    b = workers.start("--queues", "default", procedures=FAST)
    for result in (added, later, retried):
        wait_finished(result, timeout=60, workers=workers)

    assert (added.status, added.return_value) == (TaskResultStatus.SUCCESSFUL, 5)
    assert later.return_value == 42  # an async task, awaited on a worker's event loop
    assert retried.return_value == {"attempt": 2, "worker_ids": 2}
    assert [e.exception_class_path for e in retried.errors] == ["builtins.ValueError"]
    assert set(added.worker_ids + later.worker_ids + retried.worker_ids) <= {a.worker_id, b.worker_id}

    # No worker listens on the emails queue yet: the task waits for one that does.
    assert result_of(email.id).status == TaskResultStatus.READY
    c = workers.start("--queues", "emails", "--burst", procedures=FAST)
    assert c.wait(60) == 0, c.describe()
    email.refresh()
    assert (email.status, email.worker_ids) == (TaskResultStatus.SUCCESSFUL, [c.worker_id])
    assert email.return_value == {"sent_to": "a@example.com", "subject": "hello"}
    for w in (a, b):
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 0


def test_a_real_worker_keeps_deferral_and_priorities(workers):
    later = timezone.now() + timedelta(seconds=3)
    deferred = tasks.add.using(run_after=later).enqueue(1, 1)
    low = tasks.add.using(priority=-5).enqueue(1, 2)
    high = tasks.add.using(priority=50).enqueue(1, 3)
    middle = tasks.add.enqueue(1, 4)
    # One thread claiming one task at a time: the claims are in the order the queue gives them.
    w = workers.start("--concurrency", "1", procedures={**FAST, "PREFETCH": 0})
    wait_finished(deferred, timeout=60, workers=workers)
    for result in (low, high, middle):
        result.refresh()
    assert [r.return_value for r in sorted((low, high, middle), key=lambda r: r.started_at)] == [4, 5, 3]
    assert deferred.started_at >= later and deferred.return_value == 2
    w.signal(signal.SIGTERM)
    assert w.wait(30) == 0


def test_a_task_lost_with_its_worker_runs_again_and_its_writes_commit_once(workers, tmp_path):
    marker = tmp_path / "marker"
    result = tasks.record_slowly.enqueue(str(marker), 30)
    a = workers.start(procedures=FAST)
    wait_for(lambda: read_pid(marker) == a.pid, timeout=60, workers=workers, what="the task to start on a")
    a.signal(signal.SIGKILL)
    assert a.wait(10) == -signal.SIGKILL
    marker.unlink()

    b = workers.start(procedures=FAST)
    wait_finished(result, timeout=90, workers=workers)
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == {"pid": b.pid}
    assert result.worker_ids == [a.worker_id, b.worker_id]  # one per attempt, the lost one included
    assert result.errors == []  # a lost worker is not the task's error
    # Atomic: the killed attempt's write rolled back with its transaction; the second one committed once.
    assert list(Effect.objects.filter(procedure_id=result.id).values_list("attempt", "worker_pid")) == [(2, b.pid)]
    assert list(Lease.objects.filter(procedure_id=result.id).order_by("token").values_list("outcome", flat=True)) \
        == ["expired", "completed"]


def test_a_worker_that_cannot_import_a_task_leaves_it_for_one_that_can(workers):
    result = extra_tasks.only_some_workers.enqueue(21)
    old = workers.start("--burst", procedures=FAST)
    assert old.wait(60) == 0
    assert old.log_lines(containing="task:testproject.testapp.extra_tasks.only_some_workers"), old.describe()
    row = ProcedureRun.objects.get(id=result.id)
    assert (row.status, row.lease_token, row.error) == ("ready", 0, "")

    new = workers.start("--burst", procedures=FAST, env={"TESTAPP_EXTRA_TYPES": "1"})
    assert new.wait(60) == 0
    result.refresh()
    assert (result.status, result.return_value, result.worker_ids) == (TaskResultStatus.SUCCESSFUL, 42,
                                                                       [new.worker_id])


def test_a_non_json_return_value_fails_the_task_saying_what_to_change(workers):
    result = tasks.returns_a_date.enqueue()
    w = workers.start("--burst", procedures=FAST)
    assert w.wait(60) == 0
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert "is a date, which is not JSON" in ProcedureRun.objects.get(id=result.id).error
    assert result.args == [] and result.worker_ids == [w.worker_id]


def test_each_failed_attempt_keeps_its_own_traceback(workers):
    result = tasks.flaky.enqueue(succeed_on=3)
    a = workers.start("--concurrency", "2", procedures=FAST)
    b = workers.start(procedures=FAST)
    wait_finished(result, timeout=60, workers=workers)

    assert result.return_value == {"attempt": 3, "worker_ids": 3}
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"] * 2
    first, second = (e.traceback for e in result.errors)
    assert first != second
    for n, trace in ((1, first), (2, second)):
        assert trace.startswith("Traceback (most recent call last)"), trace
        assert f"ValueError: attempt {n} fails on purpose" in trace and "in flaky" in trace
    assert len(result.worker_ids) == 3 and set(result.worker_ids) <= {a.worker_id, b.worker_id}
    # One worker may have run all three attempts while the other was still starting: a SIGTERM before its
    # handlers exist would kill it, so stop them only once both are registered (handlers come first).
    wait_for(lambda: Worker.objects.filter(worker_id__in=[a.worker_id, b.worker_id]).count() == 2,
             timeout=60, what="both workers to register", workers=workers)
    for w in (a, b):
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 0


def test_an_async_task_is_awaited_on_the_worker_event_loop(workers):
    results = [tasks.where_am_i.enqueue(pause=0.2) for _ in range(20)]
    workers.start("--concurrency", "1", procedures=FAST)
    for result in results:
        wait_finished(result, timeout=60, workers=workers)
    assert {(r.status, r.return_value["thread"], r.return_value["attempt"]) for r in results} == {
        (TaskResultStatus.SUCCESSFUL, "procedures-async-loop", 1)}
