"""Procedures that sleep (``Status.sleep``): tests/store/test_sleep.py and tests/runtime/test_sleep_processes.py."""

from datetime import datetime

from django.utils import timezone

from django_procedures import LockKey, Procedure, Status, step
from testproject.testapp.step_helpers import FAST_RETRY, _effect

__all__ = ["Sleeper"]


class Sleeper(Procedure):
    """``before`` sleeps ``seconds`` (or ``until``, an ISO time), then ``after`` runs; it holds ``keys``.

    ``after`` records the real time it ran (``woke_at``); with ``sleep_last`` it sleeps that many seconds again,
    in the last step, and then completes.
    """

    type_name = "testapp.Sleeper"
    retry = FAST_RETRY

    def lock_keys(self):
        return [LockKey(name, mode) for name, mode in self.state.get("keys", [])]

    @step
    def before(self, ctx):
        _effect(ctx, "before")
        if "until" in self.state:
            return Status.sleep(until=datetime.fromisoformat(self.state["until"]))
        return Status.sleep(self.state.get("seconds", 0))

    @step
    def after(self, ctx):
        _effect(ctx, "after")
        self.state["woke_at"] = timezone.now().isoformat()
        self.state["attempt"] = ctx.attempt
        if self.state.get("sleep_last"):
            return Status.sleep(self.state["sleep_last"])
        return Status.done(output={"woke_at": self.state["woke_at"]})
