"""``Context``: what a step sees of the run it belongs to."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django_procedures.exceptions import NotActive, ShuttingDown
from django_procedures.store.inbox import ReceivedEvent, received
from django_procedures.store.tree import ChildResult

#: ``Context.event`` not read yet.
_UNREAD: Any = object()


class Activity:
    """Whether a claim may still do work; shared by the executor, heartbeat and shutdown."""

    def __init__(self) -> None:
        self._lost: str | None = None
        self._watchers: list[Callable[[str], None]] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()

    def lose(self, reason: str) -> None:
        with self._lock:
            if self._lost is not None:
                return
            self._lost = reason
            watchers = list(self._watchers)
        for watcher in watchers:  # an async step's worker cancels its coroutine (``runtime.lane``)
            watcher(reason)

    def on_lost(self, watcher: Callable[[str], None]) -> None:
        """Call ``watcher(reason)`` once, on the thread that finds the claim lost (at once if it is already)."""
        with self._lock:
            if self._lost is None:
                self._watchers.append(watcher)
                return
        watcher(self._lost)

    @property
    def lost_reason(self) -> str | None:
        return self._lost

    def check(self) -> None:
        """Before (or inside) a step: stop if the lease is gone or the worker is shutting down."""
        self.check_lease()
        if self.stopping.is_set():
            raise ShuttingDown("the worker is shutting down")

    def check_lease(self) -> None:
        """After a step returned: only a lost lease stops its result (a shutdown lets it commit)."""
        if self._lost is not None:
            raise NotActive(self._lost)


@dataclass
class Context:
    """Passed to every step: where the run is, and ``ensure_active()`` for long steps.

    The worker makes one for each step. Made by hand (to call a step in a unit
    test) it is always active and its progress reports go nowhere.
    """

    procedure_id: uuid.UUID
    type_name: str
    attempt: int = 1
    step_index: int = 0
    step_name: str = ""
    lease_token: int = 0
    children: tuple[ChildResult, ...] = ()
    logger: logging.LoggerAdapter[logging.Logger] = field(init=False, repr=False)
    # The runtime's side of the run (see ``_attach``), kept out of the constructor users see.
    _activity: Activity = field(init=False, repr=False, default_factory=Activity)
    _progress: Any = field(init=False, repr=False, default=None)
    _claim: Any = field(init=False, repr=False, default=None)
    _event: Any = field(init=False, repr=False, default=_UNREAD)

    def __post_init__(self) -> None:
        self.logger = logging.LoggerAdapter(logging.getLogger("django_procedures.procedure"), self.log_extra())

    def _attach(self, activity: Activity, progress: Any = None, claim: Any = None) -> Context:
        """The worker's side: the claim's activity flags, where ``progress()`` reports go (a
        ``runtime.progress.ProgressRecorder``), the ``store.claim.Claim`` (the tasks backend reports from it)."""
        self._activity, self._progress, self._claim = activity, progress, claim
        return self

    def log_extra(self) -> dict[str, Any]:
        return {"procedure_id": str(self.procedure_id), "type_name": self.type_name,
                "lease_token": self.lease_token, "attempt": self.attempt, "step": self.step_name}

    def stop_schedule(self, reason: str) -> None:
        """End the schedule that started this run: it is disabled, with ``reason`` recorded."""
        from django_procedures.store.schedules import stop_from_run

        stop_from_run(self.procedure_id, self.lease_token, reason)

    def progress(self, done: float, total: float | None = None, note: str = "") -> None:
        """Report how far this step has got: ``done`` of ``total`` units (None: unknown), with a short note.

        At most one write a second per procedure: carried by a checkpoint (or
        the suspension or completion) with no statement of its own, or written
        on its own outside the step's transaction (visible while an atomic
        step still runs). Bad
        input never fails the step: it is clamped or ignored, with a warning
        (see ``policy.progress.normalise``). A lost lease drops the report.
        """
        if self._progress is not None and self._activity.lost_reason is None:
            # In an async step (on an event loop) the report is held back, never written: a write there would
            # block every awaiting step. The checkpoint or the heartbeat carries it; ``aprogress`` writes it.
            self._progress.report(done, total, note, self.logger, write=not _on_event_loop())

    async def aprogress(self, done: float, total: float | None = None, note: str = "") -> None:
        """``progress()`` for an ``async def`` step: a write that is due is made off the event loop."""
        from asgiref.sync import sync_to_async

        await sync_to_async(self.progress)(done, total, note)

    @property
    def event(self) -> ReceivedEvent | None:
        """The event the wait before this step took (``name``, ``payload``, ``sent_at``, ``sent_by``); None after
        the wait's timeout, or when the step does not follow a ``Status.wait_for_event``. Read once, when first
        asked for (a context made by hand has None, or what a test sets)."""
        if self._event is _UNREAD:
            self._event = None if self._claim is None else received(self.procedure_id, self.step_index)
        return self._event

    @event.setter
    def event(self, value: ReceivedEvent | None) -> None:
        self._event = value

    def ensure_active(self) -> None:
        """Raise ``NotActive`` if this run must stop: lease lost or not renewed in time, or shutdown."""
        self._activity.check()

    async def aensure_active(self) -> None:
        """``ensure_active()`` for an ``async def`` step: it also lets the other awaiting steps run first."""
        await asyncio.sleep(0)
        self._activity.check()


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
