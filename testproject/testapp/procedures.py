"""Procedures the test suite runs, in-process and in real worker processes.

Behaviour is driven by the state, so one class serves many tests:
``marker`` (a file path touched when a step starts), ``sleep`` ({step: seconds}),
``until`` ({step: file}: the step waits until that file exists, so a test can catch it in flight however
slow the machine), ``poll`` (True: wait in short slices calling ``ctx.ensure_active()``).
"""

import os
import signal
import time
from pathlib import Path

from django_procedures import NonRetryable, Procedure, RetryPolicy, Status, step
from testproject.testapp.step_helpers import FAST_RETRY, _effect, _pause


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


class WritesAfterPause(Procedure):
    """One atomic step that pauses first (``sleep``/``marker`` as above) and then writes its row.

    A connection cut during the pause surfaces in the step's own query; one failed
    attempt fails it for good, so an outage wrongly counted as a failure shows.
    """

    type_name = "testapp.WritesAfterPause"
    retry = RetryPolicy(max_attempts=1)

    @step
    def work(self, ctx):
        _pause(self, ctx, "work")
        _effect(ctx, "work")
        return Status.done(output=ctx.attempt)


class ChargesAfterPause(Procedure):
    """A non-idempotent step that pauses first and then records its charge (autocommitted)."""

    type_name = "testapp.ChargesAfterPause"

    @step(idempotent=False)
    def charge(self, ctx):
        _pause(self, ctx, "charge")
        _effect(ctx, "charge")


class RollsBackAfterPause(Procedure):
    """Books, is refused, and rolls back: the rollback pauses first and then writes its row (one attempt only)."""

    type_name = "testapp.RollsBackAfterPause"
    retry = RetryPolicy(max_attempts=1)

    @step
    def book(self, ctx):
        _effect(ctx, "book")

    @step
    def confirm(self, ctx):
        raise NonRetryable("the supplier said no")

    def rollback(self, ctx):
        _pause(self, ctx, "rollback")
        _effect(ctx, "rollback")


class Reports(Procedure):
    """Reports progress: ``reports`` ([[done, total, note], ...]) in its atomic step ``count``, writes an
    Effect row, then waits for the ``flag`` file (if given, calling ``ctx.ensure_active()``), then reports
    ``after``; ``fail`` makes the step raise at its end (it fails for good)."""

    type_name = "testapp.Reports"
    retry = RetryPolicy(max_attempts=1)

    @step
    def count(self, ctx):
        for done, total, note in self.state.get("reports", []):
            ctx.progress(done, total, note)
        _effect(ctx, "count")
        if self.state.get("flag"):
            deadline = time.monotonic() + 120
            while not Path(self.state["flag"]).exists():
                ctx.ensure_active()
                if time.monotonic() > deadline:
                    raise RuntimeError("flag never appeared")
                time.sleep(0.02)
        for done, total, note in self.state.get("after", []):
            ctx.progress(done, total, note)
        if self.state.get("fail"):
            raise NonRetryable("failed after reporting")

    @step
    def quiet(self, ctx):
        pass


class EnqueuesATask(Procedure):
    """Enqueues the ``add`` task of Django's Tasks framework from an atomic step; ``fail`` then fails the step."""

    type_name = "testapp.EnqueuesATask"

    @step
    def enqueue(self, ctx):
        from testproject.testapp.tasks import add

        self.state["task_id"] = add.enqueue(*self.state["numbers"]).id
        if self.state.get("fail"):
            raise NonRetryable("fails after enqueueing")


from testproject.testapp.faults import *  # noqa: E402, F403 - registers the misbehaving procedures


class SessionProbe(Procedure):
    """One atomic step that returns the session settings its transaction runs with (tests behind PgBouncer)."""

    type_name = "testapp.SessionProbe"

    @step
    def probe(self, ctx):
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('idle_in_transaction_session_timeout'), "
                           "current_setting('application_name')")
            timeout, name = cursor.fetchone()
        return Status.done(output={"idle_in_transaction_session_timeout": timeout, "application_name": name})
from testproject.testapp.async_steps import *  # noqa: E402, F403 - async def steps
from testproject.testapp.limited import *  # noqa: E402, F403 - procedures under flow-control limits
from testproject.testapp.long_steps import *  # noqa: E402, F403 - steps holding a transaction a long time
from testproject.testapp.soak import *  # noqa: E402, F403 - the fault-injection soak's procedures
from testproject.testapp.trees import *  # noqa: E402, F403 - trees, rollback and lock keys
from testproject.testapp.versioned import *  # noqa: E402, F403 - a class version set per worker process
from testproject.testapp.waiting import *  # noqa: E402, F403 - procedures that sleep
