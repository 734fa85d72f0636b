"""``async def`` steps on real ``manage.py procedures_worker`` processes (PostgreSQL): many in flight on one
thread, heartbeats, cancel, timeout, SIGTERM, the async ORM and a blocked event loop.

Nothing here is timed: "in flight at once" is shown by every step having started while a gate file that
would let them finish does not exist yet, with one executor thread.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from django_procedures.models import Lease, ProcedureRun
from testproject.testapp.async_steps import AsyncAwaits, AsyncBlocks, AsyncCounts, AsyncTimesOut, AsyncWaitsForGate
from testproject.testapp.models import Effect
from testproject.testapp.procedures import ThreeSteps
from tests.runtime.processes import Workers, wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

WAIT = 120
QUIET = {"SWEEP_SECONDS": 600.0, "STATS_SECONDS": 600.0}


def row(pid) -> ProcedureRun:
    return ProcedureRun.objects.get(id=pid)


def start(workers: Workers, *args: str, lease_seconds: float = 10.0):
    return workers.start("--concurrency", "1", *args, lease_seconds=lease_seconds, procedures=QUIET)


def gated(tmp_path: Path, count: int, **extra) -> tuple[list, Path]:
    gate = tmp_path / "gate"
    handles = [AsyncWaitsForGate.submit({"marker": str(tmp_path / f"p{i}"), "gate": str(gate), **extra})
               for i in range(count)]
    return handles, gate


def started(tmp_path: Path, count: int) -> bool:
    return all((tmp_path / f"p{i}.started").exists() for i in range(count))


def test_many_async_steps_await_at_once_on_one_thread_and_their_leases_are_renewed(workers, tmp_path):
    worker = start(workers, "--async-concurrency", "40", lease_seconds=2.0)
    handles, gate = gated(tmp_path, 30)
    wait_for(lambda: started(tmp_path, 30), timeout=WAIT, workers=workers,
             what="all 30 async steps in flight at once (one executor thread)")
    first = {h.id: row(h.id).lease_expires_at for h in handles}
    # Longer than a lease: only the heartbeat renewing every one of them keeps them.
    wait_for(lambda: all(row(h.id).lease_expires_at > first[h.id] for h in handles), timeout=WAIT,
             workers=workers, what="each lease renewed")
    ThreeSteps.submit()  # the executor thread is free meanwhile
    wait_for(lambda: ProcedureRun.objects.filter(type_name=ThreeSteps.type_name, status="done").exists(),
             timeout=WAIT, workers=workers, what="a sync procedure beside them")
    gate.write_text("open")
    wait_for(lambda: all(row(h.id).status == "done" for h in handles), timeout=WAIT, workers=workers,
             what="every async procedure done")
    assert {(row(h.id).attempt, row(h.id).lost) for h in handles} == {(1, 0)}
    assert Effect.objects.filter(step="wait").count() == 30
    assert set(Lease.objects.filter(procedure_id__in=[h.id for h in handles]).values_list("outcome", flat=True)) \
        == {"completed"}
    assert worker.alive()


def test_cancel_cancels_the_coroutine_at_its_next_await(workers, tmp_path):
    start(workers)
    (handle,), gate = gated(tmp_path, 1)
    wait_for(lambda: started(tmp_path, 1), timeout=WAIT, workers=workers, what="the step to start")
    handle.cancel(by="test")
    wait_for(lambda: workers.started[0].log_lines(containing=str(handle.id)) and any(
        "cancelled" in line or "lost" in line for line in workers.started[0].log_lines(containing=str(handle.id))),
        timeout=WAIT, workers=workers, what="the worker to drop the cancelled step")
    gate.write_text("open")  # too late: the coroutine was cancelled, so it never writes its Effect
    other = AsyncAwaits.submit()
    wait_for(lambda: row(other.id).status == "done", timeout=WAIT, workers=workers, what="the next async procedure")
    assert row(handle.id).status == "cancelled"
    assert not Effect.objects.filter(procedure_id=handle.id).exists()


def test_a_timeout_cancels_the_coroutine_and_counts_a_failed_attempt(workers):
    start(workers)
    handle = AsyncTimesOut.submit()
    wait_for(lambda: row(handle.id).status == "failed", timeout=WAIT, workers=workers, what="three timed-out tries")
    run = row(handle.id)
    assert run.failures == 3 and "step slow ran past its timeout of 0.5s; the coroutine was cancelled" in run.error
    assert Effect.objects.filter(procedure_id=handle.id, step="cancelled").count() == 3


def test_the_async_orm_works_inside_a_step(workers):
    start(workers)
    Effect.objects.bulk_create([Effect(procedure_id=uuid.uuid4(), step="seed") for _ in range(3)])
    handle = AsyncCounts.submit()
    wait_for(lambda: row(handle.id).status == "done", timeout=WAIT, workers=workers, what="the count")
    assert row(handle.id).output == {"effects": 3}  # await Effect.objects.acount() on the worker's event loop
    assert row(handle.id).progress["note"] == "counted"  # await ctx.aprogress()


def test_sigterm_drains_async_steps_that_finish_in_time(workers, tmp_path):
    worker = start(workers, "--shutdown-timeout", "60")
    handles, gate = gated(tmp_path, 5)
    wait_for(lambda: started(tmp_path, 5), timeout=WAIT, workers=workers, what="five async steps in flight")
    worker.signal(signal.SIGTERM)
    wait_for(lambda: worker.log_lines(containing="SIGTERM; shutting down"), timeout=WAIT, workers=workers,
             what="the worker to start shutting down")
    gate.write_text("open")  # within the shutdown timeout: each step finishes and its completion commits
    assert worker.wait(WAIT) == 0
    assert {(row(h.id).status, row(h.id).lost) for h in handles} == {("done", 0)}
    assert Effect.objects.filter(step="wait").count() == 5
    assert worker.final_count("succeeded") == 5


def test_sigterm_releases_async_steps_still_awaiting_at_the_shutdown_timeout(workers, tmp_path):
    worker = start(workers, "--shutdown-timeout", "1")
    handles, _gate = gated(tmp_path, 5)
    wait_for(lambda: started(tmp_path, 5), timeout=WAIT, workers=workers, what="five async steps in flight")
    worker.signal(signal.SIGTERM)
    assert worker.wait(WAIT) == 0
    runs = [row(h.id) for h in handles]
    assert {(r.status, r.lost, r.failures) for r in runs} == {("ready", 0, 0)}  # released: nothing spent
    assert not Effect.objects.exists()
    assert worker.final_count("released") == 5


def test_a_step_that_blocks_the_event_loop_is_reported_by_name(workers):
    worker = start(workers)
    handle = AsyncBlocks.submit({"seconds": 2.5})
    wait_for(lambda: row(handle.id).status == "done", timeout=WAIT, workers=workers, what="the blocking step")
    wait_for(lambda: worker.log_lines(containing="the event loop is blocked"), timeout=WAIT, workers=workers,
             what="the stall warning")
    (line,) = worker.log_lines(containing="the event loop is blocked")
    assert f"step blocks of {AsyncBlocks.type_name} (procedure {handle.id})" in line


def test_a_blocked_event_loop_turns_healthz_to_503_naming_the_step_and_back(workers, tmp_path):
    from tests.runtime.test_health_processes import answers
    from tests.runtime.test_metrics_processes import free_port

    port = free_port()
    start(workers, "--metrics-port", str(port))
    wait_for(answers(port, "/healthz", 200), timeout=WAIT, workers=workers, what="/healthz to answer 200")
    release = tmp_path / "release"
    handle = AsyncBlocks.submit({"release": str(release)})
    try:
        body = wait_for(answers(port, "/healthz", 503), timeout=WAIT, workers=workers, what="/healthz to answer 503")
    finally:
        release.touch()
    check = body["checks"]["event_loop"]
    assert not check["ok"] and check["age_seconds"] > 1.0
    assert check["reason"].endswith(f"(blocked by step blocks of {AsyncBlocks.type_name} (procedure {handle.id}))")
    assert all(c["ok"] for name, c in body["checks"].items() if name != "event_loop")
    wait_for(lambda: row(handle.id).status == "done", timeout=WAIT, workers=workers, what="the blocking step")
    wait_for(answers(port, "/healthz", 200), timeout=WAIT, workers=workers, what="/healthz to answer 200 again")
