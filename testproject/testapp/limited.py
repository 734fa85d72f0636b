"""Procedures under flow-control limits: tests/store/test_limits.py and tests/runtime/test_limit_processes.py."""

import time
from pathlib import Path

from django_procedures import Limit, NonRetryable, Procedure, Status, step
from testproject.testapp.step_helpers import FAST_RETRY, GATE_TIMEOUT, _effect

__all__ = ["Limited"]


class Limited(Procedure):
    """Runs under the limits its state names: ``concurrency`` ``[[name, max], ...]`` (a name may use
    ``{customer}``), ``rate`` ``[[name, count, per], ...]``.

    ``work`` writes an ``enter`` Effect row, holds ``hold`` seconds (or until the ``flag`` file exists), writes
    ``exit``, then ends its lease as ``then`` says: ``"done"`` (default, through ``finish``), ``"fail"``,
    ``"retry"`` (fails its first attempt), ``"sleep"`` (a durable sleep of ``0`` seconds before ``finish``),
    ``"wait"`` (waits for the event ``go`` before ``finish``).
    ``next_customer`` becomes ``customer`` in ``work``; ``break_limits`` makes ``limits()`` raise from then on.
    """

    type_name = "testapp.Limited"
    retry = FAST_RETRY

    def limits(self):
        if self.state.get("limits_raise"):
            raise RuntimeError("limits broke")
        if self.state.get("bad_limits"):
            return self.state["bad_limits"]
        found = [Limit.concurrency(name.format(**self.state), most) for name, most in self.state.get("concurrency", [])]
        found += [Limit.rate(name.format(**self.state), count, per) for name, count, per in self.state.get("rate", [])]
        return found

    @step
    def work(self, ctx):
        _effect(ctx, "enter")
        flag = self.state.get("flag")
        deadline = time.monotonic() + self.state.get("hold", 0)
        while (flag and not Path(flag).exists()) or time.monotonic() < deadline:
            time.sleep(0.02)
            if flag and time.monotonic() > deadline + GATE_TIMEOUT:
                raise RuntimeError("flag never appeared")
        _effect(ctx, "exit")
        if "next_customer" in self.state:  # the limits of the next claim follow the new state
            self.state["customer"] = self.state.pop("next_customer")
        if self.state.get("break_limits"):
            self.state["limits_raise"] = True
        then = self.state.get("then", "done")
        if then == "fail":
            raise NonRetryable("failed on purpose")
        if then == "retry" and ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        if then == "sleep" and not self.state.get("slept"):
            self.state["slept"] = True
            return Status.sleep(0)
        if then == "wait" and not self.state.get("waited"):
            self.state["waited"] = True
            return Status.wait_for_event("go", timeout=60)
        return None

    @step
    def finish(self, ctx):
        _effect(ctx, "finish")
