"""A claim while a worker runs it, and the outcomes a run can have."""

from __future__ import annotations

import logging
import threading
import time
import traceback as tb
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from django_procedures.policy.text import describe
from django_procedures.procedure import StepSpec
from django_procedures.runtime.context import Activity
from django_procedures.runtime.progress import ProgressRecorder
from django_procedures.store.claim import Claim
from django_procedures.store.tree import ChildResult

logger = logging.getLogger("django_procedures.worker")


class Outcome(StrEnum):
    """How a claim ended, as the worker counts it (``CONTINUED`` and ``ROLLING_BACK`` never end a claim: the
    executor goes on with the next step, or the rollback)."""

    CONTINUED = "continued"
    ROLLING_BACK = "rolling_back"
    COMPLETED = "completed"
    SUSPENDED = "suspended"
    SLEPT = "slept"
    WAITED = "waited"
    RETRIED = "retried"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"
    RELEASED = "released"
    LOST = "lost"


@dataclass
class RunningClaim:
    """A claim being executed: its activity flags and the step in flight (read by heartbeat and shutdown)."""

    claim: Claim
    activity: Activity = field(default_factory=Activity)
    children: tuple[ChildResult, ...] = ()
    current: StepSpec | None = None
    in_step: bool = False
    step_index: int = 0
    step_attempt: int = 1
    step_started_at: datetime | None = None
    #: A non-idempotent step's body was entered and its outcome is not committed yet: stopping the claim now
    #: parks it (``policy.interruption``); settling the attempt clears it.
    effect_uncommitted: bool = False
    #: The committed step count when the step in flight began (a timeout failure is fenced on it).
    group_step: int = 0
    #: ``time.monotonic()`` after which the step in flight has run past its timeout.
    deadline: float | None = None
    #: ``time.monotonic()`` of the claim, and of the moment a thread took it up (None while prefetched).
    claimed_at: float = field(default_factory=time.monotonic)
    taken_at: float | None = None
    #: Runs on the worker's event loop (``runtime.lane``): counted against ``--async-concurrency``, never prefetched.
    on_loop: bool = False
    #: Given back unstarted (see ``policy.prefetch``): the thread that dequeues it skips it.
    given_back: bool = False
    #: The executor thread that took it up (None while prefetched); see ``runtime.crew``.
    owner: threading.Thread | None = None
    #: The worker's lease; None when no heartbeat renews it (``drain()``).
    lease_seconds: float | None = None
    #: ``time.monotonic()`` since an atomic step's transaction holds SQLite's write lock (see ``write_lock``).
    write_lock_since: float | None = None
    #: Its steps' ``ctx.progress()`` reports; a worker on PostgreSQL writes them on a side connection.
    progress: ProgressRecorder = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.progress is None:
            self.progress = ProgressRecorder(self.claim)


def log_extra(claim: Claim) -> dict[str, Any]:
    return {"procedure_id": str(claim.id), "type_name": claim.type_name, "lease_token": claim.lease_token,
            "attempt": claim.attempt}


def error_text(error: BaseException) -> str:
    """``"<Type>: <message>"``, safe to store whatever the exception does (see ``policy.text.describe``)."""
    return describe(error)


def trace_text() -> str:
    """The traceback of the exception being handled, or "" if even formatting it fails."""
    try:
        return tb.format_exc()
    except BaseException:  # a hostile exception must not stop its failure being recorded
        return ""
