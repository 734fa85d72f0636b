"""Acceptance: docs/async.md read as a user would: async steps under drain(), refusals when a class is defined."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_procedures import Procedure, Status, send_event, step
from django_procedures.exceptions import ProceduresConfigError
from django_procedures.models import ProcedureRun
from django_procedures.testing import drain
from testproject.testapp.models import Effect

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 1, 1, tzinfo=UTC)


class Summarise(Procedure):
    type_name = "acc.Summarise"

    @step(timeout=60)
    async def ask(self, ctx):
        await asyncio.sleep(0)
        ctx.ensure_active()
        await ctx.aensure_active()
        ctx.progress(1, 2, "asked")
        self.state["summary"] = self.state["text"].upper()

    @step
    async def save(self, ctx):
        await ctx.aprogress(2, 2, "saving")
        await Effect.objects.acreate(step="save", procedure_id=ctx.procedure_id)
        self.state["count"] = await Effect.objects.acount()
        return Status.done(output=len(self.state["summary"]))


class AsyncExecute(Procedure):
    type_name = "acc.AsyncExecute"

    async def execute(self, ctx):
        await asyncio.sleep(0)
        n = self.state.get("n", 0) + 1
        self.state["n"] = n
        if n < 3:
            return Status.executing()
        return Status.done(output=n)


class AsyncWaits(Procedure):
    type_name = "acc.AsyncWaits"

    @step
    async def first(self, ctx):
        return Status.sleep(timedelta(hours=1))

    @step
    async def second(self, ctx):
        return Status.wait_for_event("go")

    @step
    def third(self, ctx):  # a plain def step of an async type runs too
        return Status.done(output=ctx.event.payload)


def test_the_doc_example_runs_under_drain():
    Effect.objects.create(step="before", procedure_id="0190d7a2-5c3e-7b1a-9f00-2d4e6a8b0c1d")
    handle = Summarise.submit({"document": 1, "text": "abc"})
    drain()
    assert handle.refresh().status == "done"
    assert handle.output == 3
    assert handle.run.state["count"] == 2  # the async ORM sees the test's rows
    assert handle.progress["done"] == 2


def test_async_execute_is_a_state_machine():
    handle = AsyncExecute.submit({})
    drain()
    assert (handle.refresh().status, handle.output) == ("done", 3)


def test_async_steps_sleep_and_wait_like_sync_ones():
    handle = AsyncWaits.submit({}, run_after=T0)
    drain(now=T0)
    assert handle.refresh().waiting_for == "timer"
    drain(now=T0 + timedelta(hours=1))
    assert handle.refresh().waiting_for == "event"
    send_event(handle, "go", 42)
    drain(now=T0 + timedelta(hours=1))
    assert (handle.refresh().status, handle.output) == ("done", 42)


def test_an_async_step_that_raises_fails_its_attempt():
    class Raises(Procedure):
        type_name = "acc.Raises"

        @step
        async def only(self, ctx):
            raise RuntimeError("async boom")

    handle = Raises.submit({})
    drain()
    assert handle.refresh().status in ("retrying", "failed")
    assert "async boom" in handle.error


def test_a_timeout_cancels_the_coroutine_and_counts_a_failed_attempt():
    class Slow(Procedure):
        type_name = "acc.Slow"

        @step(timeout=0.2)
        async def ask(self, ctx):
            await asyncio.sleep(30)

    handle = Slow.submit({})
    drain()
    handle.refresh()
    assert handle.status in ("retrying", "failed")
    assert "ran past its timeout" in handle.error and "cancelled" in handle.error
    assert ProcedureRun.objects.get(id=handle.id).failures == 1


def test_atomic_true_on_an_async_step_is_improperly_configured_when_defined():
    with pytest.raises(ImproperlyConfigured):
        class Atomic(Procedure):
            type_name = "acc.Atomic"

            @step(atomic=True)
            async def only(self, ctx): ...


def test_an_async_step_defaults_to_not_atomic():
    class NotAtomic(Procedure):
        type_name = "acc.NotAtomic"

        @step
        async def only(self, ctx): ...

    NotAtomic.submit({})
    drain()


@pytest.mark.parametrize("method", ["rollback", "on_child_failed", "lock_keys", "upgrade_state"])
def test_async_hooks_are_refused_when_the_class_is_defined_naming_the_method(method):
    async def hook(self, *args):
        return None

    with pytest.raises(ProceduresConfigError) as refused:
        type("Hooks", (Procedure,), {"type_name": "acc.Hooks", "__module__": __name__, method: hook,
                                     "only": step(lambda self, ctx: None)})
    assert method in str(refused.value)


def test_an_async_generator_step_is_refused_naming_it():
    with pytest.raises(ProceduresConfigError) as refused:
        class Gen(Procedure):
            type_name = "acc.Gen"

            @step
            async def produce(self, ctx):
                yield 1
    assert "produce" in str(refused.value)


def test_an_async_generator_execute_is_refused():
    with pytest.raises(ProceduresConfigError) as refused:
        class GenExecute(Procedure):
            type_name = "acc.GenExecute"

            async def execute(self, ctx):
                yield 1
    assert "execute" in str(refused.value)


def test_a_plain_def_step_returning_a_coroutine_fails_for_good_naming_the_step():
    async def work():
        return None

    class Fetch(Procedure):
        type_name = "acc.Fetch"

        @step
        def fetch(self, ctx):
            return work()

    handle = Fetch.submit({})
    drain()
    assert handle.refresh().status == "failed"
    assert "fetch" in handle.error and "async def" in handle.error
