"""Procedures that sleep (``Status.sleep``) or wait for events (``Status.wait_for_event``): tests/store/test_sleep.py,
tests/store/test_events.py and the process tests beside them."""

from datetime import datetime

from django.utils import timezone

from django_procedures import LockKey, Procedure, Status, step
from testproject.testapp.step_helpers import FAST_RETRY, _effect

__all__ = ["Approval", "Sleeper"]


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


def _seen(event):
    if event is None:
        return None
    return {"name": event.name, "payload": event.payload, "sent_by": event.sent_by,
            "sent_at": event.sent_at.isoformat()}


class Approval(Procedure):
    """``ask`` waits for one of ``names`` (default approved/rejected) with ``timeout`` seconds (None: none);
    ``decide`` records ``ctx.event`` (failing its first attempt with ``fail_first``) and, with ``again``, waits
    for an event of that name; ``finish`` outputs both events it saw."""

    type_name = "testapp.Approval"
    retry = FAST_RETRY

    def lock_keys(self):
        return [LockKey(name, mode) for name, mode in self.state.get("keys", [])]

    @step
    def ask(self, ctx):
        _effect(ctx, "ask")
        return Status.wait_for_event(*self.state.get("names", ["approved", "rejected"]),
                                     timeout=self.state.get("timeout"))

    @step
    def decide(self, ctx):
        _effect(ctx, "decide")
        if self.state.get("fail_first") and ctx.attempt == 1:
            raise RuntimeError("the first attempt of decide fails")
        self.state["first"] = _seen(ctx.event)
        self.state["decided_at"] = timezone.now().isoformat()
        if self.state.get("again"):
            return Status.wait_for_event(self.state["again"])
        return Status.executing()

    @step
    def finish(self, ctx):
        _effect(ctx, "finish")
        return Status.done(output={"first": self.state["first"], "second": _seen(ctx.event)})
