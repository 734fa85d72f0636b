"""The worker's main thread claims for its event loop only when something can be due for it (policy.loop_wake)."""

import threading
import time

import pytest
from django.db import connection

from django_procedures.models import ProcedureRun
from django_procedures.runtime import worker as worker_module
from django_procedures.runtime.worker import WorkerRuntime, resolve_config
from testproject.testapp.async_steps import AsyncNoop, SyncNoop
from testproject.testapp.procedures import ThreeSteps

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

QUIET = {"LISTEN_NOTIFY": True, "POLL_SECONDS": 30, "SWEEP_SECONDS": 60, "STATS_SECONDS": 60}


@pytest.fixture
def claims(monkeypatch):
    """Every claim of the worker's main thread: ``(for the loop, asked for, got)``."""
    real, seen = worker_module.claim, []

    def counted(*args, **kwargs):
        got = real(*args, **kwargs)
        seen.append((AsyncNoop.type_name in kwargs["type_names"], kwargs["limit"], len(got)))
        return got

    monkeypatch.setattr(worker_module, "claim", counted)
    return seen


def test_a_sync_drain_does_not_claim_for_an_idle_event_loop_at_every_pass(settings, claims):
    """Found by the throughput benchmark: beside each claim for the threads the main thread claimed for its empty
    event loop and then read the next due time (0.18 transactions per no-op procedure, a quarter of them)."""
    settings.PROCEDURES = {**QUIET, "BURST_WAIT_SECONDS": 0, "PREFETCH": 0}
    SyncNoop.submit_many([{} for _ in range(60)])
    WorkerRuntime(resolve_config(concurrency=2, burst=True, lease_seconds=10, shutdown_timeout=5)).run()

    assert set(ProcedureRun.objects.values_list("status", flat=True)) == {"done"}
    for_threads = [c for c in claims if not c[0]]
    for_loop = [c for c in claims if c[0]]
    assert len(for_threads) >= 15, claims  # enough passes for the count below to mean something
    assert len(for_loop) <= 2, claims  # the first pass's, and at most one recheck


def _run_until_done(worker, claims, submit, timeout=15.0):
    """Run ``worker`` on this thread (its signal handlers need the main thread); another thread waits for the
    worker's first claim for the loop (in ``claims``), calls ``submit()`` and waits for that procedure to
    finish, then stops the worker. Returns the seconds from the submit to the finish (None: not within
    ``timeout``)."""
    took = []

    def helper():
        try:
            deadline = time.monotonic() + timeout
            while not any(for_loop for for_loop, _, _ in claims) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)  # the worker waits now
            started = time.monotonic()
            procedure_id = submit()
            while time.monotonic() < deadline:
                if ProcedureRun.objects.filter(id=procedure_id, status="done").exists():
                    took.append(time.monotonic() - started)
                    break
                time.sleep(0.05)
        finally:
            connection.close()
            worker.stop("test over")

    thread = threading.Thread(target=helper)
    thread.start()
    try:
        worker.run()
    finally:
        thread.join()
    return took[0] if took else None


def test_an_async_procedure_submitted_after_an_empty_loop_claim_is_claimed_on_its_notify(settings, claims):
    settings.PROCEDURES = QUIET
    worker = WorkerRuntime(resolve_config(concurrency=1, lease_seconds=10, shutdown_timeout=5))
    took = _run_until_done(worker, claims, lambda: AsyncNoop.submit({}).id)

    assert took is not None and took < 5, took  # not the 30 s of POLL_SECONDS: the NOTIFY woke the loop's claim
    assert next(c for c in claims if c[0])[2] == 0  # the first claim for the loop had found nothing


def test_an_async_procedure_due_later_is_claimed_when_it_falls_due(settings, claims):
    """No NOTIFY comes when a run's time comes: the loop is claimed for again at the next due time it read."""
    settings.PROCEDURES = QUIET
    handle = AsyncNoop.submit({}, run_after=1.5)
    submitted = time.monotonic()
    worker = WorkerRuntime(resolve_config(concurrency=1, lease_seconds=10, shutdown_timeout=5))
    took = _run_until_done(worker, claims, lambda: handle.id)

    assert took is not None and time.monotonic() - submitted < 8, took
    loop_claims = [c for c in claims if c[0]]
    assert loop_claims[0][2] == 0 and any(got == 1 for _, _, got in loop_claims), claims


def test_an_async_procedure_falling_due_while_the_threads_are_busy_is_claimed_then(settings, claims):
    """With the threads' backlog in hand, the loop's own next due time is read (not the backlog's, due already):
    the async run starts when it falls due, long before the backlog is done and the 30 s poll."""
    settings.PROCEDURES = {**QUIET, "PREFETCH": 0}
    ThreeSteps.submit_many([{"sleep": {"one": 0.25}} for _ in range(16)])  # 4 s of work for one thread
    handle = AsyncNoop.submit({}, run_after=1.0)
    worker = WorkerRuntime(resolve_config(concurrency=1, lease_seconds=10, shutdown_timeout=5))
    took = _run_until_done(worker, claims, lambda: handle.id)

    assert took is not None and took < 2.5, took
    assert ProcedureRun.objects.filter(type_name=ThreeSteps.type_name).exclude(status="done").exists()
