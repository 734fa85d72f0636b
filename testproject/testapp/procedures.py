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
from testproject.testapp.models import Effect

#: How long a step waits for a file a test is to create, at most: a safety net against a hung test, far longer
#: than any test waits on a loaded machine before creating it.
GATE_TIMEOUT = 600.0

FAST_RETRY = RetryPolicy(max_attempts=3, initial_delay=0.0, backoff=1.0, jitter=0.0)


def _effect(ctx, name: str) -> None:
    Effect.objects.create(procedure_id=ctx.procedure_id, step=name, attempt=ctx.attempt, worker_pid=os.getpid())


def _pause(proc, ctx, name: str) -> None:
    marker = proc.state.get("marker")
    if marker:
        Path(f"{marker}.{name}").write_text(str(os.getpid()))
    seconds = proc.state.get("sleep", {}).get(name, 0)
    deadline = time.monotonic() + seconds
    gate = proc.state.get("until", {}).get(name)
    while time.monotonic() < deadline or (gate and not Path(gate).exists()):
        if proc.state.get("poll"):
            ctx.ensure_active()
        if gate and time.monotonic() > deadline + GATE_TIMEOUT:
            raise RuntimeError(f"{gate} never appeared")
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


# -- trees, rollback and lock keys -------------------------------------------------------------

from django_procedures import LockKey  # noqa: E402
from testproject.testapp.models import Effect as _Effect  # noqa: E402


class Leaf(Procedure):
    """A child: doubles ``n``; ``fail`` makes it fail for good, and so does ``fail_until`` (a path) while that
    file is missing; ``sleep``/``marker`` as above."""

    type_name = "testapp.Leaf"
    retry = FAST_RETRY

    def lock_keys(self):
        return [LockKey(name, mode) for name, mode in self.state.get("keys", [])]

    @step
    def work(self, ctx):
        _effect(ctx, "leaf")
        _pause(self, ctx, "work")
        until = self.state.get("fail_until")
        if self.state.get("fail") or (until and not Path(until).exists()):
            raise NonRetryable(f"leaf {self.state.get('n')} refuses")
        return Status.done(output=self.state.get("n", 0) * 2)


class Parent(Procedure):
    """Spawns ``fanout`` leaves (or nodes of ``depth`` - 1), then sums what they returned."""

    type_name = "testapp.Parent"
    retry = FAST_RETRY

    def lock_keys(self):
        return [LockKey(name, mode) for name, mode in self.state.get("keys", [])]

    @step
    def spawn(self, ctx):
        depth, fanout = self.state.get("depth", 1), self.state.get("fanout", 3)
        failing = set(self.state.get("failing", []))
        child_keys = self.state.get("child_keys", [])
        if depth <= 1:
            children = [Leaf({"n": i, "fail": i in failing, "keys": child_keys,
                              "sleep": self.state.get("child_sleep", {})}) for i in range(fanout)]
        else:
            children = [Parent({"depth": depth - 1, "fanout": fanout}) for _ in range(fanout)]
        return Status.suspended(children)

    @step
    def collect(self, ctx):
        self.state["seen"] = [[c.status, c.output] for c in ctx.children]
        total = sum(c.output for c in ctx.children if c.status == "done")
        return Status.done(output=total)

    def rollback(self, ctx):
        if self.state.get("rollback_effect"):
            _Effect.objects.create(procedure_id=ctx.procedure_id, step="parent-rollback")


class TolerantParent(Parent):
    """Keeps waiting when a child fails; collects what succeeded."""

    type_name = "testapp.TolerantParent"

    def on_child_failed(self, ctx, child):
        self.state.setdefault("failed_children", []).append(child.error)


class Pipeline(Procedure):
    """Spawns a Flaky (failing its first ``flaky`` attempts), a ThreeSteps and a Leaf that refuses; tolerates the
    failure and collects the children's statuses (the tree timeline's picture: retries, a failure, waiting)."""

    type_name = "testapp.Pipeline"

    @step
    def spawn(self, ctx):
        return Status.suspended([Flaky({"fail_times": self.state.get("flaky", 2)}), ThreeSteps({}),
                                 Leaf({"n": 1, "fail": True})])

    @step
    def collect(self, ctx):
        return Status.done(output=[c.status for c in ctx.children])

    def on_child_failed(self, ctx, child):
        self.state.setdefault("failed_children", []).append(child.error)


class SuspendsLast(Procedure):
    type_name = "testapp.SuspendsLast"

    @step
    def only(self, ctx):
        return Status.suspended([Leaf({"n": 1})])


class Compensated(Procedure):
    """Books something in step one, fails for good in step two; rollback undoes the booking."""

    type_name = "testapp.Compensated"
    retry = RetryPolicy(max_attempts=2, initial_delay=0.0, jitter=0.0)

    @step
    def book(self, ctx):
        _effect(ctx, "book")
        self.state["booked"] = True

    @step
    def confirm(self, ctx):
        raise NonRetryable("the supplier said no")

    def rollback(self, ctx):
        _effect(ctx, "rollback")
        if ctx.attempt <= self.state.get("rollback_fails", 0):
            raise RuntimeError(f"rollback attempt {ctx.attempt} failed")


class KeyHolder(Procedure):
    """Holds ``keys`` while it sleeps ``hold`` seconds (or until ``flag`` file exists, if given)."""

    type_name = "testapp.KeyHolder"
    retry = FAST_RETRY

    def lock_keys(self):
        return [LockKey(name, mode) for name, mode in self.state.get("keys", [])]

    @step
    def hold(self, ctx):
        _effect(ctx, "hold")
        flag = self.state.get("flag")
        deadline = time.monotonic() + self.state.get("hold", 0)
        while (flag and not Path(flag).exists()) or time.monotonic() < deadline:
            time.sleep(0.02)
            if flag and time.monotonic() > deadline + GATE_TIMEOUT:
                raise RuntimeError("flag never appeared")


# -- trees in real worker processes (tests/runtime/test_tree_processes.py and its neighbours) ----


def _wait_for_file(path, what: str, timeout: float = GATE_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} never appeared")
        time.sleep(0.02)


class Gated(Procedure):
    """A child like Leaf (returns ``n`` * 2) that writes ``marker``, then waits for the ``flag`` file, then ends.

    Optional ``keys`` as Leaf. Its one step is atomic and tiny once the flag exists,
    so a test can hold it back and then catch its final transaction.
    """

    type_name = "testapp.Gated"
    retry = FAST_RETRY

    def lock_keys(self):
        return [LockKey(name, mode) for name, mode in self.state.get("keys", [])]

    @step
    def work(self, ctx):
        _effect(ctx, "gated")
        if self.state.get("marker"):
            Path(self.state["marker"]).write_text(str(os.getpid()))
        if self.state.get("flag"):
            _wait_for_file(self.state["flag"], "flag")
        return Status.done(output=self.state.get("n", 0) * 2)


class Spawner(Procedure):
    """A parent whose children are spelled out: ``children`` is a list of ``{"state": {...}, "gated": bool,
    "priority": int}`` (a Gated child if ``gated``, else a Leaf); ``collect`` sums what the done ones returned.

    ``keys``: its own lock keys. ``gate``: a file the spawn step waits for before spawning. ``marker`` /
    ``sleep`` ({"spawn": seconds, "rollback": seconds}): the spawn step writes ``<marker>.spawn`` and sleeps
    after its Effect row and before it returns ``Status.suspended``; the rollback likewise writes
    ``<marker>.rollback`` and sleeps after its Effect row -- each on its first attempt only. ``collect`` and
    ``rollback`` write an Effect row each, so a test can count how often they committed. ``tolerant``: a
    failed child is recorded in ``failed_children`` instead of failing the parent, and ``on_child_failed``
    writes ``<marker>.on_child_failed`` and sleeps ``sleep["on_child_failed"]`` (``poll`` as usual).
    """

    type_name = "testapp.Spawner"
    retry = FAST_RETRY

    def lock_keys(self):
        return [LockKey(name, mode) for name, mode in self.state.get("keys", [])]

    @step
    def spawn(self, ctx):
        _effect(ctx, "spawn")
        if self.state.get("gate"):
            _wait_for_file(self.state["gate"], "gate")
        if ctx.attempt == 1:
            _pause(self, ctx, "spawn")
        children = []
        for spec in self.state["children"]:
            cls = Gated if spec.get("gated") else Leaf
            children.append(cls(spec.get("state", {}), priority=spec.get("priority", 0)))
        return Status.suspended(children)

    @step
    def collect(self, ctx):
        _effect(ctx, "collect")
        self.state["seen"] = [[c.status, c.output] for c in ctx.children]
        return Status.done(output=sum(c.output for c in ctx.children if c.status == "done"))

    def on_child_failed(self, ctx, child):
        if not self.state.get("tolerant"):
            super().on_child_failed(ctx, child)
        self.state.setdefault("failed_children", []).append(child.error)
        _pause(self, ctx, "on_child_failed")

    def rollback(self, ctx):
        _effect(ctx, "rollback")
        if ctx.attempt == 1:
            _pause(self, ctx, "rollback")


class Heartbeat(Procedure):
    """A scheduled no-op that records its tick; ``stop_after`` ends its schedule from the run."""

    type_name = "testapp.Heartbeat"

    @step
    def beat(self, ctx):
        _effect(ctx, "beat")
        _pause(self, ctx, "beat")
        if self.state.get("stop"):
            ctx.stop_schedule(self.state["stop"])


class Secretive(Procedure):
    """Fails for good with secrets in its state: the admin masks the keys named in ``redact``."""

    type_name = "testapp.Secretive"
    retry = FAST_RETRY
    redact = ("password", "card")

    @step
    def use(self, ctx):
        raise NonRetryable("the card was declined")


# -- the fault-injection soak (benchmarks/soak.py) ---------------------------------------------
#
# Every step body writes one Effect row named after the step, so the soak can count how often each
# step's database effect took place: exactly once per committed atomic step, at least once per
# committed non-atomic step, at most once for a non-idempotent step. ``ms`` in the state is the
# step's think time in milliseconds.

SOAK_RETRY = RetryPolicy(max_attempts=4, initial_delay=0.2, backoff=2.0, max_delay=2.0, jitter=0.2)


def _soak_work(proc, ctx, name: str) -> None:
    _effect(ctx, name)
    ms = proc.state.get("ms", 0)
    if ms:
        time.sleep(ms / 1000)


def _soak_keys(proc):
    return [LockKey(name, mode) for name, mode in proc.state.get("keys", [])]


class SoakSteps(Procedure):
    """Three atomic steps (``a`` chained to ``b`` without a checkpoint when ``chain``), then a non-atomic one."""

    type_name = "soak.Steps"
    retry = SOAK_RETRY

    @step
    def a(self, ctx):
        _soak_work(self, ctx, "a")
        return Status.executing(persist=not self.state.get("chain"))

    @step
    def b(self, ctx):
        _soak_work(self, ctx, "b")

    @step
    def c(self, ctx):
        _soak_work(self, ctx, "c")
        self.state["sum"] = self.state.get("n", 0) * 3

    @step(atomic=False)
    def d(self, ctx):
        _soak_work(self, ctx, "d")  # autocommitted: at least once
        return Status.done(output=self.state["sum"])


class SoakFlaky(Procedure):
    """``work`` writes its row, then fails while ``ctx.attempt <= fail_times`` (the row rolls back)."""

    type_name = "soak.Flaky"
    retry = SOAK_RETRY

    @step
    def prepare(self, ctx):
        _soak_work(self, ctx, "prepare")

    @step
    def work(self, ctx):
        _soak_work(self, ctx, "work")
        if ctx.attempt <= self.state.get("fail_times", 0):
            raise RuntimeError(f"soak failure on attempt {ctx.attempt}")
        return Status.done(output=ctx.attempt)


class SoakLeaf(Procedure):
    """A child: returns ``n + 1``; ``fail`` fails it for good; may take lock keys (lent by its parent)."""

    type_name = "soak.Leaf"
    retry = SOAK_RETRY

    def lock_keys(self):
        return _soak_keys(self)

    @step
    def work(self, ctx):
        _soak_work(self, ctx, "work")
        if self.state.get("fail"):
            raise NonRetryable(f"soak leaf {self.state.get('n')} refuses")
        return Status.done(output=self.state.get("n", 0) + 1)


class SoakTree(Procedure):
    """Spawns ``fanout`` leaves (or subtrees while ``depth`` > 1), then sums their outputs.

    ``failing`` lists leaves that fail: the parent then fails and rolls back.
    ``child_keys`` are taken by each leaf (inside the tree, lent by the parent's ``keys``).
    """

    type_name = "soak.Tree"
    retry = SOAK_RETRY

    def lock_keys(self):
        return _soak_keys(self)

    @step
    def spawn(self, ctx):
        _soak_work(self, ctx, "spawn")
        depth, fanout, ms = self.state.get("depth", 1), self.state.get("fanout", 2), self.state.get("ms", 0)
        if depth > 1:
            children = [SoakTree({"depth": depth - 1, "fanout": fanout, "ms": ms}) for _ in range(fanout)]
        else:
            failing = set(self.state.get("failing", []))
            children = [SoakLeaf({"n": i, "fail": i in failing, "keys": self.state.get("child_keys", []), "ms": ms})
                        for i in range(fanout)]
        return Status.suspended(children)

    @step
    def collect(self, ctx):
        _soak_work(self, ctx, "collect")
        if [c.status for c in ctx.children] != ["done"] * len(ctx.children):
            raise NonRetryable(f"collect saw unfinished children: {[c.status for c in ctx.children]}")
        return Status.done(output=sum(c.output for c in ctx.children))

    def rollback(self, ctx):
        _effect(ctx, "rollback")


class SoakKeyed(Procedure):
    """Holds ``keys`` across two atomic steps (and a checkpoint between them)."""

    type_name = "soak.Keyed"
    retry = SOAK_RETRY

    def lock_keys(self):
        return _soak_keys(self)

    @step
    def take(self, ctx):
        _soak_work(self, ctx, "take")

    @step
    def put(self, ctx):
        _soak_work(self, ctx, "put")


class SoakCompensated(Procedure):
    """Books in step one, is refused in step two, and rolls the booking back."""

    type_name = "soak.Compensated"
    retry = SOAK_RETRY

    @step
    def book(self, ctx):
        _soak_work(self, ctx, "book")

    @step
    def confirm(self, ctx):
        raise NonRetryable("soak supplier said no")

    def rollback(self, ctx):
        _effect(ctx, "rollback")


class SoakCharge(Procedure):
    """A non-idempotent step (its row is autocommitted: at most once), then an atomic receipt."""

    type_name = "soak.Charge"
    retry = SOAK_RETRY

    @step(idempotent=False)
    def charge(self, ctx):
        _soak_work(self, ctx, "charge")

    @step
    def receipt(self, ctx):
        _soak_work(self, ctx, "receipt")


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


class PlainParent(Procedure):
    """Spawns ``fanout`` leaves (``failing``: the indexes that fail), then ``report``s; no rollback, so a child's
    failure leaves it ``failed`` (the default ``on_child_failed``)."""

    type_name = "testapp.PlainParent"
    retry = FAST_RETRY

    @step
    def spawn(self, ctx):
        failing = set(self.state.get("failing", []))
        return Status.suspended([Leaf({"n": i, "fail": i in failing}) for i in range(self.state.get("fanout", 2))])

    @step
    def report(self, ctx):
        return Status.done(output=[c.status for c in ctx.children])


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
