"""The worker's main loop, in-process: upkeep never starves claiming."""

import itertools
import logging
import os
import signal
import threading
import time
from datetime import timedelta

import pytest

from django_procedures.models import ProcedureRun
from django_procedures.policy.prefetch import GIVE_BACK_SECONDS
from django_procedures.runtime import worker as worker_module
from django_procedures.runtime.executor import Outcome, RunningClaim, execute
from django_procedures.runtime.shutdown import graceful_signals
from django_procedures.runtime.worker import WorkerRuntime, resolve_config
from django_procedures.store.claim import claim
from testproject.testapp.procedures import ThreeSteps

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_a_sweep_slower_than_its_interval_is_not_run_again_before_the_next_claim(monkeypatch, settings):
    """Found by the soak: the next sweep was due from the start of a slow one, so it ran between every claim."""
    settings.PROCEDURES = {"SWEEP_SECONDS": 0.2, "BURST_WAIT_SECONDS": 0, "LISTEN_NOTIFY": False}
    real, sweeps = worker_module.maintain, []

    def slow_maintain():
        started = time.monotonic()
        time.sleep(0.4)
        report = real()
        sweeps.append((started, time.monotonic()))
        return report

    monkeypatch.setattr(worker_module, "maintain", slow_maintain)
    ThreeSteps.submit_many([{"sleep": {"one": 0.1}} for _ in range(15)])  # 1.5 s of work at least
    WorkerRuntime(resolve_config(concurrency=1, burst=True, lease_seconds=10, shutdown_timeout=5)).run()

    assert set(ProcedureRun.objects.values_list("status", flat=True)) == {"done"}
    gaps = [later[0] - earlier[1] for earlier, later in itertools.pairwise(sweeps)]
    assert len(gaps) >= 2 and min(gaps) >= 0.19, gaps


# -- claims that end before a thread runs a step of them: counted and logged like any lost claim ----------------


def test_a_claim_cancelled_while_it_waited_for_a_thread_is_counted_lost_and_logged(caplog, settings):
    """Found by the tree tests on a busy machine: given back after a cancel, it was in no stats count and no log."""
    caplog.set_level(logging.INFO, logger="django_procedures.worker")
    settings.PROCEDURES = {"LISTEN_NOTIFY": False}
    handle = ThreeSteps.submit({})
    worker = WorkerRuntime(resolve_config(concurrency=1, lease_seconds=30))  # its threads are not started
    try:
        assert worker._claim(1) == 1  # held, waiting for a thread (as a claim ahead of the threads waits)
        handle.cancel(by="test")
        (waiting,) = worker.snapshot()
        waiting.claimed_at -= GIVE_BACK_SECONDS  # it has waited too long: the main loop gives it back
        worker.held.give_back_stale()
    finally:
        worker.waker.close()
    assert (worker.stats["claimed"], worker.stats["lost"], worker.stats["given_back"], worker.busy) == (1, 1, 0, 0)
    assert f"procedure {handle.id}: stopped: lease token 1 was taken over or cancelled" in caplog.text
    assert ProcedureRun.objects.get(id=handle.id).status == "cancelled"


def test_a_claim_lost_before_its_first_step_logs_that_it_stopped(caplog):
    caplog.set_level(logging.INFO, logger="django_procedures.worker")
    handle = ThreeSteps.submit({})
    (claimed,) = claim("w", type_names=[ThreeSteps.type_name], limit=1, lease_seconds=30)
    running = RunningClaim(claimed)
    running.activity.lose("lease token 1 was taken over or cancelled")  # as the heartbeat does
    assert execute(running) == Outcome.LOST
    assert f"procedure {handle.id}: stopped: lease token 1 was taken over or cancelled" in caplog.text
    assert ProcedureRun.objects.get(id=handle.id).step == 0  # no step ran


# -- claiming no more than there is -----------------------------------------------------------------------------


def test_a_claim_that_got_fewer_than_it_asked_for_is_not_followed_at_once_by_another(monkeypatch, settings):
    """An idle worker handed one procedure does not claim again before something new can be due: that claim
    found nothing and competed with the step just handed over (the pickup benchmark's hand-over time)."""
    settings.PROCEDURES = {"BURST_WAIT_SECONDS": 0, "LISTEN_NOTIFY": False, "PREFETCH": 0}
    real, got = worker_module.claim, []

    def counted(*args, **kwargs):
        claims = real(*args, **kwargs)
        if ThreeSteps.type_name in kwargs["type_names"]:  # the threads' claims (not the event loop's)
            got.append((kwargs["limit"], len(claims)))
        return claims

    monkeypatch.setattr(worker_module, "claim", counted)
    ThreeSteps.submit()
    WorkerRuntime(resolve_config(concurrency=4, burst=True, lease_seconds=10, shutdown_timeout=5)).run()

    assert set(ProcedureRun.objects.values_list("status", flat=True)) == {"done"}
    # The claim that got it; then, once it finished and woke the loop, the one that found the queue empty.
    assert got == [(4, 1), (4, 0)], got


# -- a burst of timers: claimed between its wake batches --------------------------------------------------------


def test_a_burst_of_timers_due_at_once_is_claimed_from_its_first_wake_batch_on(monkeypatch, settings):
    """Issue 26's 10,000 timers due in one second: the worker woke them all (a batch per transaction) before it
    claimed one, so its threads idled through the whole wake. Now it claims after each batch; every sleeper is
    still woken once, and not before its wake time."""
    from datetime import timedelta

    from django.utils import timezone

    from django_procedures.store import timers
    from django_procedures.testing import drain
    from testproject.testapp.waiting import Sleeper

    settings.PROCEDURES = {"BURST_WAIT_SECONDS": 5, "LISTEN_NOTIFY": False, "SWEEP_SECONDS": 60, "PREFETCH": 0}
    until = timezone.now() + timedelta(seconds=2)
    Sleeper.submit_many([{"until": until.isoformat()} for _ in range(7)])
    assert drain()["slept"] == 7
    monkeypatch.setattr(timers, "BATCH", 2)
    real_wake, real_claim, seen = timers.wake_batch, worker_module.claim, []

    def wake_batch(*args, **kwargs):
        woken = real_wake(*args, **kwargs)
        seen.append(("wake", woken, timezone.now()))
        return woken

    def claim(*args, **kwargs):
        claims = real_claim(*args, **kwargs)
        seen.append(("claim", len(claims), timezone.now()))
        return claims

    monkeypatch.setattr(timers, "wake_batch", wake_batch)
    monkeypatch.setattr(worker_module, "claim", claim)
    WorkerRuntime(resolve_config(concurrency=1, burst=True, lease_seconds=10, shutdown_timeout=5)).run()

    assert set(ProcedureRun.objects.values_list("status", flat=True)) == {"done"}
    # (The maintenance sweep at the start found none due.)
    wakes = [(woken, at) for kind, woken, at in seen if kind == "wake" and woken]
    assert [woken for woken, _ in wakes] == [2, 2, 2, 1], seen  # a batch a turn, until one comes short
    assert min(at for _, at in wakes) >= until  # never before the wake time
    # A claim that got one of them came before the last batch was woken (it used to come only after).
    first_claimed = next(i for i, (kind, got, _) in enumerate(seen) if kind == "claim" and got)
    last_wake = max(i for i, (kind, woken, _) in enumerate(seen) if kind == "wake" and woken)
    assert first_claimed < last_wake, seen
    assert all(step == 2 for step in ProcedureRun.objects.values_list("step", flat=True))


# -- SIGTERM: the handler only notes it ---------------------------------------------------------------------------


def test_the_signal_handler_waits_for_no_lock_the_main_thread_holds(settings):
    """A handler runs between two bytecodes of the main thread, which may hold a lock at that moment: here the
    non-reentrant lock inside the worker's stop Event (as within ``Event.wait()``). A handler that set the Event
    there waited for ever; a watchdog thread releases the lock after 10 s so that this test fails instead."""
    settings.PROCEDURES = {"LISTEN_NOTIFY": False}
    worker = WorkerRuntime(resolve_config(concurrency=1, lease_seconds=30))  # its threads are not started
    held = worker._stopping._cond._lock  # CPython's Event: a Condition over a plain Lock
    handled, blocked = threading.Event(), []

    def watchdog():
        if not handled.wait(10):
            blocked.append(True)
            held.release()

    try:
        with graceful_signals(worker._on_signal):
            held.acquire()
            threading.Thread(target=watchdog, daemon=True).start()
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before kill() returns to this frame
            handled.set()
            if not blocked:
                held.release()
        assert not blocked, "the signal handler waited for a lock the main thread held"
        assert not worker._stopping.is_set()  # noted only: the main loop acts on it
        assert worker.waker.wait(0)  # and woken to do so
        assert worker._should_stop() and worker._stop_reason == "SIGTERM"
        assert worker._stopping.is_set()
    finally:
        worker.waker.close()


def test_an_idle_long_running_worker_with_nothing_due_waits_until_its_next_chore(settings):
    """Found by the limits benchmark: with nothing due and no --burst, the idle wait raised ``TypeError`` (min() of
    one float), and the loop logged a database error and backed off on every pass instead of waiting."""
    settings.PROCEDURES = {"LISTEN_NOTIFY": False}
    worker = WorkerRuntime(resolve_config(concurrency=1, lease_seconds=30))  # its threads are not started
    try:
        assert 4.0 < worker._idle_timeout(None, time.monotonic() + 5) <= 5.0
        due = worker_module.clock.now() + timedelta(seconds=2)
        assert 1.0 < worker._idle_timeout(due, time.monotonic() + 5) <= 2.0
    finally:
        worker.waker.close()
