"""The procedures the benchmarks run: no-op bodies, so what is measured is the engine.

Registered only where ``benchmarks.settings`` is in use (the runner and the
workers it starts).
"""

from __future__ import annotations

import time

from django_procedures import Limit, Procedure, Status, step


class Noop(Procedure):
    """One atomic step that does nothing: the unit of the throughput and backlog benchmarks."""

    type_name = "bench.Noop"

    @step
    def run(self, ctx):
        return None


class Stamp(Procedure):
    """One step that returns the wall-clock time at which it started (pickup latency)."""

    type_name = "bench.Stamp"

    @step
    def run(self, ctx):
        return Status.done(output={"started": time.time()})


class TenSteps(Procedure):
    """Ten no-op atomic steps, each committed with its own checkpoint."""

    type_name = "bench.TenSteps"

    @step
    def s0(self, ctx):
        pass

    @step
    def s1(self, ctx):
        pass

    @step
    def s2(self, ctx):
        pass

    @step
    def s3(self, ctx):
        pass

    @step
    def s4(self, ctx):
        pass

    @step
    def s5(self, ctx):
        pass

    @step
    def s6(self, ctx):
        pass

    @step
    def s7(self, ctx):
        pass

    @step
    def s8(self, ctx):
        pass

    @step
    def s9(self, ctx):
        pass


class TenStepsReporting(TenSteps):
    """``TenSteps`` that reports progress once per step (the observability benchmark)."""

    type_name = "bench.TenStepsReporting"

    def _report(self, ctx):
        ctx.progress(ctx.step_index + 1, 10, note=ctx.step_name)

    @step
    def s0(self, ctx):
        self._report(ctx)

    @step
    def s1(self, ctx):
        self._report(ctx)

    @step
    def s2(self, ctx):
        self._report(ctx)

    @step
    def s3(self, ctx):
        self._report(ctx)

    @step
    def s4(self, ctx):
        self._report(ctx)

    @step
    def s5(self, ctx):
        self._report(ctx)

    @step
    def s6(self, ctx):
        self._report(ctx)

    @step
    def s7(self, ctx):
        self._report(ctx)

    @step
    def s8(self, ctx):
        self._report(ctx)

    @step
    def s9(self, ctx):
        self._report(ctx)


class TreeLeaf(Procedure):
    """A child that does nothing."""

    type_name = "bench.TreeLeaf"

    @step
    def run(self, ctx):
        return None


class TreeParent(Procedure):
    """Spawns ``fanout`` leaves, waits for them, then finishes."""

    type_name = "bench.TreeParent"

    @step
    def spawn(self, ctx):
        return Status.suspended([TreeLeaf({"n": i}) for i in range(self.state.get("fanout", 20))])

    @step
    def collect(self, ctx):
        return Status.done(output=len(ctx.children))


class SleepThenStamp(Procedure):
    """Sleeps until ``state["until"]`` (ISO, aware), then returns the wall-clock time its second step started
    (the timer benchmarks: how late a wake-up is)."""

    type_name = "bench.SleepThenStamp"

    @step
    def sleep(self, ctx):
        from datetime import datetime

        return Status.sleep(until=datetime.fromisoformat(self.state["until"]))

    @step
    def stamp(self, ctx):
        return Status.done(output={"started": time.time()})


class WaitThenStamp(Procedure):
    """Waits for the event ``go``, then returns the wall-clock time its second step started (the events
    benchmark: how long from the send's commit to the next step)."""

    type_name = "bench.WaitThenStamp"

    @step
    def wait(self, ctx):
        return Status.wait_for_event("go")

    @step
    def stamp(self, ctx):
        return Status.done(output={"started": time.time()})


class AsyncNoop(Procedure):
    """One ``async def`` step that does nothing (docs/async.md): awaited on the worker's event loop."""

    type_name = "bench.AsyncNoop"

    @step
    async def run(self, ctx):
        return None


class SyncNoopNonAtomic(Procedure):
    """One non-atomic sync step that does nothing: the same writes as ``AsyncNoop``'s (an async step is never
    atomic), on an executor thread."""

    type_name = "bench.SyncNoopNonAtomic"

    @step(atomic=False)
    def run(self, ctx):
        return None


class AwaitsIO(Procedure):
    """Awaits ``state["seconds"]`` of simulated I/O (``asyncio.sleep``), as a call to a slow API would."""

    type_name = "bench.AwaitsIO"

    @step
    async def run(self, ctx):
        import asyncio

        await asyncio.sleep(self.state["seconds"])


class LimitedNoop(Noop):
    """``Noop`` under a concurrency limit no drain reaches (the limits benchmark): the claim's limited pass
    takes and frees a slot of it for every run, and never has to pass one by."""

    type_name = "bench.LimitedNoop"

    def limits(self):
        return [Limit.concurrency("bench", 10_000)]


class KeyedSleep(Procedure):
    """Sleeps ``state["seconds"]`` under ``Limit.concurrency("bench-key:<state["key"]>", 1)`` and returns when its
    step entered and left (the limits benchmark counts how many ran at once from these, not by sampling)."""

    type_name = "bench.KeyedSleep"

    def limits(self):
        return [Limit.concurrency(f"bench-key:{self.state['key']}", 1)]

    @step
    def run(self, ctx):
        enter = time.time()
        time.sleep(self.state["seconds"])
        return Status.done(output={"enter": enter, "exit": time.time()})


class RatedNoop(Noop):
    """``Noop`` under ``Limit.rate("bench-rate", state["count"], 1)``: at most that many claims a second."""

    type_name = "bench.RatedNoop"

    def limits(self):
        return [Limit.rate("bench-rate", self.state["count"], 1)]
