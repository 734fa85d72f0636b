"""Test procedures for trees, rollback and lock keys, in-process and in real worker processes."""

import os
import time
from pathlib import Path

from django_procedures import LockKey, NonRetryable, Procedure, RetryPolicy, Status, step
from testproject.testapp.models import Effect as _Effect
from testproject.testapp.procedures import Flaky, ThreeSteps
from testproject.testapp.step_helpers import FAST_RETRY, GATE_TIMEOUT, _effect, _pause


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


class PlainParent(Procedure):
    """Spawns ``fanout`` leaves (``failing``: the indexes that fail), then ``report``s; no rollback, so a child's
    failure leaves it ``failed`` (the default ``on_child_failed``).

    ``fail_until``: the failing leaves fail only while that file is missing. ``inner``: the state of one more
    child, a PlainParent spawned last. ``keys``: its own lock keys. ``fail_report``: its report step fails.
    """

    type_name = "testapp.PlainParent"
    retry = FAST_RETRY

    def lock_keys(self):
        return [LockKey(name, mode) for name, mode in self.state.get("keys", [])]

    @step
    def spawn(self, ctx):
        failing, until = set(self.state.get("failing", [])), self.state.get("fail_until")
        children = [Leaf({"n": i, "fail": i in failing and not until, "fail_until": until if i in failing else None})
                    for i in range(self.state.get("fanout", 2))]
        if "inner" in self.state:
            children.append(PlainParent(self.state["inner"]))
        return Status.suspended(children)

    @step
    def report(self, ctx):
        if self.state.get("fail_report"):
            raise NonRetryable("report refuses")
        return Status.done(output=[c.status for c in ctx.children])
