"""``async def`` steps run by ``drain()`` (and ``execute()``) on the calling thread, inside a ``TestCase``."""

import asyncio
import gc
import logging
import time
import warnings

import pytest
from django.test import TestCase

from django_procedures import NonRetryable, Procedure, Status, step
from django_procedures.models import ProcedureRun, Step
from django_procedures.testing import drain
from testproject.testapp.async_steps import AsyncAwaits, AsyncCounts, AsyncExecute, AsyncTimesOut
from testproject.testapp.models import Effect


class AsyncStepsInATestCase(TestCase):
    def test_an_async_step_and_a_sync_step_run_in_order(self):
        handle = AsyncAwaits.submit({"seconds": 0.01})
        report = drain()
        assert report["completed"] == 1
        run = ProcedureRun.objects.get(id=handle.id)
        assert run.status == "done" and run.state["waited"] is True
        assert list(Effect.objects.filter(procedure_id=handle.id).order_by("id").values_list("step", flat=True)) == [
            "wait", "record"]
        assert run.progress["note"] == "waited"  # reported on the event loop, carried by the checkpoint

    def test_the_async_orm_sees_the_test_case_transaction(self):
        Effect.objects.create(procedure_id=AsyncCounts.submit().id, step="seed")
        handle = AsyncCounts.submit()
        Effect.objects.create(procedure_id=handle.id, step="seed")
        drain()
        outputs = sorted(r.output["effects"] for r in ProcedureRun.objects.filter(type_name=AsyncCounts.type_name))
        assert outputs == [2, 2]  # rows written inside this test's transaction, read back by acount()

    def test_async_execute_is_a_state_machine(self):
        handle = AsyncExecute.submit()
        drain()
        assert handle.refresh().status == "done" and handle.output == 2

    def test_a_timeout_cancels_the_coroutine_and_counts_a_failed_attempt(self):
        handle = AsyncTimesOut.submit()
        drain()
        run = ProcedureRun.objects.get(id=handle.id)
        assert run.failures == 3 and run.status == "failed"  # FAST_RETRY: three attempts, no delay between them
        assert "step slow ran past its timeout of 0.5s; the coroutine was cancelled" in run.error
        assert list(Effect.objects.filter(procedure_id=handle.id).values_list("step", flat=True)) == ["cancelled"] * 3


@pytest.mark.django_db
def test_a_plain_def_step_returning_a_coroutine_fails_naming_the_step(caplog):
    async def later():
        return None

    class ReturnsCoroutine(Procedure):
        @step
        def fetch(self, ctx):
            return later()

    handle = ReturnsCoroutine.submit()
    with caplog.at_level(logging.ERROR):
        drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed"
    assert ("step fetch of test_a_plain_def_step_returning_a_coroutine_fails_naming_the_step.<locals>."
            "ReturnsCoroutine returned a coroutine but is a plain def: declare it async def fetch(self, ctx)"
            ) in run.error


@pytest.mark.django_db
def test_a_plain_def_step_returning_an_async_generator_fails_naming_the_step():
    async def rows():
        yield 1

    class ReturnsAsyncGenerator(Procedure):
        @step
        def fetch(self, ctx):
            return rows()

    handle = ReturnsAsyncGenerator.submit()
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed" and run.failures == 1  # NonRetryable: no attempt again
    assert "step fetch of test_a_plain_def_step_returning_an_async_generator_fails_naming_the_step.<locals>." \
           "ReturnsAsyncGenerator returned an async generator: nothing iterates it" in run.error


def _never_awaited_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "was never awaited" in str(w.message)]


@pytest.mark.django_db
def test_a_plain_def_rollback_returning_a_coroutine_fails_the_rollback_naming_it():
    ran = []

    async def undo():
        ran.append("undo")

    class RollsBackLater(Procedure):
        @step
        def charge(self, ctx):
            raise NonRetryable("declined")

        def rollback(self, ctx):
            return undo()

    handle = RollsBackLater.submit()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drain()
        gc.collect()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed" and ran == [] and not _never_awaited_warnings(caught)
    assert "rollback of test_a_plain_def_rollback_returning_a_coroutine_fails_the_rollback_naming_it.<locals>." \
           "RollsBackLater returned a coroutine but is a plain def: it is called on a worker thread and never " \
           "awaited" in run.rollback_error


@pytest.mark.django_db
def test_a_plain_def_on_child_failed_returning_a_coroutine_fails_the_parent_naming_it():
    class FailingChild(Procedure):
        @step
        def go(self, ctx):
            raise NonRetryable("child says no")

    class ForgivesLater(Procedure):
        @step
        def spawn(self, ctx):
            return Status.suspended([FailingChild({})])

        @step
        def after(self, ctx):
            pass

        def on_child_failed(self, ctx, child):
            return asyncio.sleep(0)

    handle = ForgivesLater.submit()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drain()
        gc.collect()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed" and not _never_awaited_warnings(caught)
    assert "on_child_failed of test_a_plain_def_on_child_failed_returning_a_coroutine_fails_the_parent_naming_it." \
           "<locals>.ForgivesLater returned a coroutine but is a plain def" in run.error
    assert not Step.objects.filter(procedure_id=handle.id, name="after").exists()


@pytest.mark.django_db
def test_an_async_step_that_raises_fails_its_attempt_with_its_error():
    class Raises(Procedure):
        @step
        async def fetch(self, ctx):
            await asyncio.sleep(0)
            raise NonRetryable("the API said no")

    handle = Raises.submit()
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed" and "the API said no" in run.error


@pytest.mark.django_db
def test_an_async_step_may_suspend_or_sleep_like_a_sync_one():
    class Sleeps(Procedure):
        @step
        async def nap(self, ctx):
            return Status.sleep(3600)

        @step
        async def after(self, ctx):
            self.state["woke"] = True

    handle = Sleeps.submit()
    assert drain()["slept"] == 1
    assert handle.refresh().waiting_for == "timer"


@pytest.mark.django_db(transaction=True)
def test_an_async_step_result_after_its_lease_moved_is_fenced_out():
    """The worker's event loop drives ``execution()`` as here: the step's result comes back after a cancel took
    the lease, and nothing of it commits."""
    from django_procedures.runtime.awaiting import StepAwait
    from django_procedures.runtime.executor import Outcome, RunningClaim, execution
    from django_procedures.store.claim import claim

    handle = AsyncAwaits.submit()
    (claimed,) = claim("test", type_names=[AsyncAwaits.type_name], queues=None, limit=1, lease_seconds=60)
    gen = execution(RunningClaim(claimed))
    pending = next(gen)
    assert isinstance(pending, StepAwait) and pending.spec.name == "wait"
    pending.close()  # never awaited: the test stands for a step still awaiting when the lease moves
    handle.cancel(by="test")
    with pytest.raises(StopIteration) as finished:
        gen.send(None)
    assert finished.value.value is Outcome.LOST
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.status, run.step, run.state.get("waited")) == ("cancelled", 0, None)
    assert not Step.objects.filter(procedure_id=handle.id, status="done").exists()


def test_the_loop_watch_reports_a_stall_with_what_blocks_it(caplog):
    import threading

    from django_procedures.runtime.loop_watch import LoopWatch

    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    watch = LoopWatch(loop, lambda: "step blocks of tests.Blocks")
    watch.start()
    seen = threading.Event()

    def block():
        seen.wait(120)  # blocks the loop until the test has seen the stall (no wall-clock race)

    try:
        assert watch.stall() is None
        with caplog.at_level(logging.WARNING, logger="django_procedures.worker"):
            loop.call_soon_threadsafe(block)
            deadline = time.monotonic() + 120
            while watch.stall() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            stall = watch.stall()
            seen.set()
            assert stall is not None and stall.seconds > 1.0 and stall.culprit == "step blocks of tests.Blocks"
            deadline = time.monotonic() + 120
            while watch.stall() is not None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert watch.stall() is None
            deadline = time.monotonic() + 120
            while not any("ran again" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
                time.sleep(0.05)
        messages = [r.getMessage() for r in caplog.records]
        assert any("the event loop is blocked" in m and "by step blocks of tests.Blocks" in m for m in messages)
    finally:
        seen.set()
        watch.stop()
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.close()
