"""Procedures with ``async def`` steps (docs/async.md): awaiting, the async ORM, a gate file, blocking the loop."""

import asyncio
import os
import time
from pathlib import Path

from django_procedures import Procedure, Status, step
from testproject.testapp.models import Effect
from testproject.testapp.step_helpers import FAST_RETRY, GATE_TIMEOUT

__all__ = [
    "AsyncAwaits",
    "AsyncBlocks",
    "AsyncCounts",
    "AsyncExecute",
    "AsyncNoop",
    "AsyncTimesOut",
    "AsyncWaitsForGate",
    "SyncNoop",
]


async def _aeffect(ctx, name: str) -> None:
    await Effect.objects.acreate(procedure_id=ctx.procedure_id, step=name, attempt=ctx.attempt,
                                 worker_pid=os.getpid())


class AsyncAwaits(Procedure):
    """Awaits ``state["seconds"]`` (default 0) between two steps, sync and async mixed."""

    @step
    async def wait(self, ctx):
        await asyncio.sleep(self.state.get("seconds", 0))
        ctx.progress(1, 2, "waited")
        await _aeffect(ctx, "wait")
        self.state["waited"] = True

    @step
    def record(self, ctx):
        Effect.objects.create(procedure_id=ctx.procedure_id, step="record", attempt=ctx.attempt,
                              worker_pid=os.getpid())


class AsyncCounts(Procedure):
    """The async ORM inside a step: counts the Effect rows and keeps the count."""

    async def execute(self, ctx):
        await ctx.aensure_active()
        self.state["effects"] = await Effect.objects.acount()
        await ctx.aprogress(1, 1, "counted")
        return Status.done(output={"effects": self.state["effects"]})


class AsyncExecute(Procedure):
    """``async def execute``: a state machine of two awaits."""

    async def execute(self, ctx):
        n = self.state.get("n", 0)
        await asyncio.sleep(0)
        if n < 2:
            self.state["n"] = n + 1
            return Status.executing()
        return Status.done(output=n)


class AsyncWaitsForGate(Procedure):
    """Writes ``<marker>.started``, then awaits until the file ``gate`` exists (or it is cancelled)."""

    retry = FAST_RETRY

    @step
    async def wait(self, ctx):
        marker, gate = self.state.get("marker"), self.state.get("gate")
        if marker:
            Path(f"{marker}.started").write_text(str(os.getpid()))
        deadline = time.monotonic() + GATE_TIMEOUT
        while not (gate and Path(gate).exists()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{gate} never appeared")
            await asyncio.sleep(0.05)
        await _aeffect(ctx, "wait")


class AsyncTimesOut(Procedure):
    """Awaits far longer than its timeout."""

    retry = FAST_RETRY

    @step(timeout=0.5)
    async def slow(self, ctx):
        try:
            await asyncio.sleep(self.state.get("seconds", 3600))
        except asyncio.CancelledError:
            await _aeffect(ctx, "cancelled")
            raise


class AsyncBlocks(Procedure):
    """Blocks the event loop with ``time.sleep`` (a mistake the worker reports): ``state['seconds']``, or until
    the file ``state['release']`` exists (at most ``GATE_TIMEOUT``)."""

    @step
    async def blocks(self, ctx):
        release = self.state.get("release")
        if release is None:
            time.sleep(self.state.get("seconds", 1.5))
            return
        deadline = time.monotonic() + GATE_TIMEOUT
        while not Path(release).exists() and time.monotonic() < deadline:
            time.sleep(0.05)


class AsyncNoop(Procedure):
    """A no-op async step (benchmarks)."""

    @step
    async def noop(self, ctx):
        await asyncio.sleep(self.state.get("seconds", 0))


class SyncNoop(Procedure):
    """A no-op sync step (benchmarks)."""

    @step(atomic=False)
    def noop(self, ctx):
        pass
