"""``async def`` steps run by ``drain()`` (and ``execute()``) on the calling thread, inside a ``TestCase``."""

import asyncio
import logging

import pytest
from django.test import TestCase

from django_procedures import NonRetryable, Procedure, Status, step
from django_procedures.models import ProcedureRun
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
