"""Procedures the test suite runs, in-process and in real worker processes.

Behaviour is driven by the state, so one class serves many tests:
``marker`` (a file path touched when a step starts), ``sleep`` ({step: seconds}),
``poll`` (True: sleep in short slices calling ``ctx.ensure_active()``).
"""

import os
import signal
import time
from pathlib import Path

from django_procedures import NonRetryable, Procedure, RetryPolicy, Status, step
from testproject.testapp.models import Effect

FAST_RETRY = RetryPolicy(max_attempts=3, initial_delay=0.0, backoff=1.0, jitter=0.0)


def _effect(ctx, name: str) -> None:
    Effect.objects.create(procedure_id=ctx.procedure_id, step=name, attempt=ctx.attempt, worker_pid=os.getpid())


def _pause(proc, ctx, name: str) -> None:
    marker = proc.state.get("marker")
    if marker:
        Path(f"{marker}.{name}").write_text(str(os.getpid()))
    seconds = proc.state.get("sleep", {}).get(name, 0)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.state.get("poll"):
            ctx.ensure_active()
        time.sleep(0.05)


class ThreeSteps(Procedure):
    """Three atomic steps, each writing one Effect row and appending its name to state['done']."""

    retry = FAST_RETRY
    type_name = "testapp.ThreeSteps"

    def _run(self, ctx, name):
        _effect(ctx, name)
        _pause(self, ctx, name)
        self.state.setdefault("done", []).append(name)

    @step
    def one(self, ctx):
        self._run(ctx, "one")

    @step
    def two(self, ctx):
        self._run(ctx, "two")

    @step
    def three(self, ctx):
        self._run(ctx, "three")
        return Status.done(output={"done": self.state["done"]})


class NonAtomicSteps(Procedure):
    type_name = "testapp.NonAtomicSteps"
    retry = FAST_RETRY

    @step(atomic=False)
    def fetch(self, ctx):
        _pause(self, ctx, "fetch")
        self.state["fetched"] = True

    @step
    def store(self, ctx):
        _effect(ctx, "store")


class Flaky(Procedure):
    """Fails its first ``fail_times`` attempts after writing a row (which must roll back)."""

    type_name = "testapp.Flaky"
    retry = RetryPolicy(max_attempts=3, initial_delay=10.0, backoff=2.0, jitter=0.0)

    @step
    def prepare(self, ctx):
        self.state["prepared"] = True

    @step
    def work(self, ctx):
        _effect(ctx, "work")
        if ctx.attempt <= self.state.get("fail_times", 0):
            raise RuntimeError(f"flaky failure on attempt {ctx.attempt}")
        return Status.done(output={"attempt": ctx.attempt})


class Refuses(Procedure):
    type_name = "testapp.Refuses"
    retry = FAST_RETRY

    @step
    def check(self, ctx):
        raise NonRetryable("the tenant does not exist", manual_retry=self.state.get("manual_retry", True))


class BadCheckpoint(Procedure):
    type_name = "testapp.BadCheckpoint"
    retry = FAST_RETRY

    @step
    def compute(self, ctx):
        _effect(ctx, "compute")
        self.state["ratio"] = float("nan")

    @step
    def finish(self, ctx):
        pass


class Counter(Procedure):
    """A state machine with execute(): counts to ``target``, one checkpoint per call."""

    type_name = "testapp.Counter"

    def execute(self, ctx):
        self.state["n"] = self.state.get("n", 0) + 1
        if self.state["n"] >= self.state["target"]:
            return Status.done(output=self.state["n"])
        return Status.executing(persist=self.state.get("persist", True))


class KillsItsWorker(Procedure):
    """Kills its own worker process on every attempt (a poisonous step)."""

    type_name = "testapp.KillsItsWorker"
    retry = RetryPolicy(max_attempts=2, max_lost=3, initial_delay=0.0)

    @step
    def boom(self, ctx):
        os.kill(os.getpid(), signal.SIGKILL)


class ChargeCard(Procedure):
    type_name = "testapp.ChargeCard"

    @step(idempotent=False)
    def charge(self, ctx):
        _pause(self, ctx, "charge")
        self.state["charged"] = True


if os.environ.get("TESTAPP_EXTRA_TYPES"):

    class OnlySomeWorkers(Procedure):
        """Registered only in workers started with TESTAPP_EXTRA_TYPES=1."""

        type_name = "testapp.OnlySomeWorkers"

        @step
        def run(self, ctx):
            _effect(ctx, "run")
