"""How a claim's attempt ended: the values the executor, the hooks, the heartbeat and the worker hand to
:func:`django_procedures.runtime.settle.settle`, which writes each with one store call."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django_procedures.models import ProcedureRun
from django_procedures.policy.retry import FailDecision, RetryDecision
from django_procedures.store.fence import StepRecord


@dataclass(frozen=True)
class StepsEnded:
    """Steps since the last checkpoint ended with ``state``: what every way of committing them carries."""

    records: tuple[StepRecord, ...]
    state: dict[str, Any]
    #: Whether a lost write may simply be run again (the first step since the last checkpoint was idempotent).
    safe: bool = field(default=True, kw_only=True)
    #: The state as JSON, measured against ``MAX_STATE_BYTES``: the write reuses it instead of encoding again.
    state_text: str = field(default="", kw_only=True)


@dataclass(frozen=True)
class Continued(StepsEnded):
    """The procedure goes on at ``next_step``: a checkpoint."""

    next_step: str


@dataclass(frozen=True)
class Completed(StepsEnded):
    """The last steps ended and the procedure is ``done`` with ``output``."""

    output: Any


@dataclass(frozen=True)
class Suspended(StepsEnded):
    """A step returned children (``rows``, built and checked): the procedure waits for them."""

    next_step: str
    rows: tuple[ProcedureRun, ...]


@dataclass(frozen=True)
class Slept(StepsEnded):
    """A step returned ``Status.sleep``: checkpoint, then the procedure waits for a timer until ``wake_at``."""

    next_step: str
    wake_at: datetime


@dataclass(frozen=True)
class Awaiting(StepsEnded):
    """A step returned ``Status.wait_for_event``: checkpoint, then the procedure waits for one of ``names``
    until ``wake_at`` (None: no timeout)."""

    next_step: str
    names: tuple[str, ...]
    wake_at: datetime | None


@dataclass(frozen=True)
class Failed:
    """An attempt failed (``record``; None when no step ran): retried or failed for good per ``decision``.

    ``rollback``: the procedure rolls back instead of ending ``failed``;
    ``hand_off``: the lease ends and the rollback is left to the next claim
    (the step's thread is still busy). ``at_step`` fences the write on the
    committed step count (a timeout decided by the heartbeat).
    """

    record: StepRecord | None
    error: str
    trace: str
    decision: RetryDecision | FailDecision
    rollback: bool = False
    hand_off: bool = False
    at_step: int | None = None
    exception: BaseException | None = None


@dataclass(frozen=True)
class RolledBack:
    """``rollback(ctx)`` succeeded: ``rolled_back``."""

    record: StepRecord


@dataclass(frozen=True)
class RollbackFailed:
    """``rollback(ctx)`` failed: tried again later, or ``failed`` with both errors."""

    record: StepRecord
    error: str
    decision: RetryDecision | FailDecision


@dataclass(frozen=True)
class Interrupted:
    """The worker stops the claim (shutdown, ``ensure_active()``): it goes back, or is parked.

    ``why`` is for the log. Whether it is parked is :func:`~.policy.interruption.after_interruption`'s
    call, from the claim as it stands when it is settled.
    """

    why: str
    #: A claim given back unstarted (it waited too long for a thread) is routine: logged at DEBUG.
    routine: bool = False


@dataclass(frozen=True)
class Parked:
    """A non-idempotent step may or may not have taken effect (its connection was lost): parked ``failed``."""

    step_name: str
    why: str


@dataclass(frozen=True)
class Lost:
    """The lease is gone (taken over, cancelled, renewal timed out): nothing is written."""

    why: str


Ended = (Continued | Completed | Suspended | Slept | Awaiting | Failed | RolledBack | RollbackFailed | Interrupted
         | Parked | Lost)


__all__ = ["Awaiting", "Completed", "Continued", "Ended", "Failed", "Interrupted", "Lost", "Parked", "RollbackFailed",
           "RolledBack", "Slept", "StepsEnded", "Suspended"]
