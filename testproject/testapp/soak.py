"""Test procedures of the fault-injection soak (benchmarks/soak.py)."""

import time

from django_procedures import LockKey, NonRetryable, Procedure, RetryPolicy, Status, step
from testproject.testapp.step_helpers import _effect

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
