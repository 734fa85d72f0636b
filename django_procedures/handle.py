"""``ProcedureHandle``: a caller's view of one submitted procedure."""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from datetime import datetime
from typing import Any

from django_procedures.exceptions import NoOutput
from django_procedures.policy.status import FINAL, RunStatus

#: While listening, the row is re-read at least this often all the same (a notification is lost
#: with a connection that broke without telling).
RECHECK_SECONDS = 5.0


class ProcedureHandle:
    """Refers to one procedure by id; ``refresh()`` re-reads it from the database.

    ``created`` is True on the handle a submit returned for a procedure it
    inserted, False when the idempotency key named an existing procedure (and
    on handles from ``get_handle``).
    """

    def __init__(self, procedure_id: uuid.UUID | str, *, created: bool = False) -> None:
        self.id = procedure_id if isinstance(procedure_id, uuid.UUID) else uuid.UUID(str(procedure_id))
        self.created = created
        self._row: Any = None

    def __repr__(self) -> str:
        status = self._row.status if self._row is not None else "?"
        return f"<ProcedureHandle {self.id} {status}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProcedureHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def refresh(self) -> ProcedureHandle:
        from django_procedures.models import ProcedureRun

        self._row = ProcedureRun.objects.only("id", "type_name", "status", "output", "error", "progress",
                                              "progress_updated_at", "waiting_for", "wake_at",
                                              "waiting_events").get(id=self.id)
        return self

    async def arefresh(self) -> ProcedureHandle:
        """``refresh()`` for async code."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.refresh)()

    @property
    def run(self) -> Any:
        """The ``ProcedureRun`` as last read (read on first use)."""
        if self._row is None:
            self.refresh()
        return self._row

    @property
    def status(self) -> RunStatus:
        """The status as last read: a ``RunStatus``, which compares equal to its string (``"done"``)."""
        return RunStatus(self.run.status)

    @property
    def is_finished(self) -> bool:
        """Whether the status as last read is final: ``done``, ``failed``, ``rolled_back`` or ``cancelled``."""
        return self.status in FINAL

    @property
    def output(self) -> Any:
        """What the procedure returned with ``Status.done(output)``.

        Raises ``NoOutput`` (a ``ValueError``) unless the procedure is ``done``
        as last read, so that "not finished" or "failed" is never mistaken for
        an output of ``None``.
        """
        row = self.run
        if row.status == RunStatus.DONE:
            return row.output
        if row.status in FINAL:
            raise NoOutput(f"procedure {self.id} ended {row.status}, so it has no output; its error: "
                           f"{row.error[:200] or '(none)'}")
        raise NoOutput(f"procedure {self.id} has not finished yet (it is {row.status}); call wait() first, or "
                       "refresh() to read it again")

    @property
    def error(self) -> str:
        return self.run.error

    @property
    def type_name(self) -> str:
        return self.run.type_name

    @property
    def progress(self) -> dict[str, Any] | None:
        """The last ``ctx.progress()`` written, as last read: ``{"done", "total", "note", "updated_at"}``, or None.

        Call ``refresh()`` to read it again while the procedure runs.
        """
        row = self.run
        if row.progress is None:
            return None
        return {"done": row.progress.get("done"), "total": row.progress.get("total"),
                "note": row.progress.get("note", ""), "updated_at": row.progress_updated_at}

    @property
    def waiting_for(self) -> str | None:
        """What the procedure waits for, as last read: ``"children"``, ``"timer"`` (it sleeps), ``"event"``, or
        None when it is not ``waiting``."""
        row = self.run
        if row.status != RunStatus.WAITING:
            return None
        return row.waiting_for or None

    @property
    def wake_at(self) -> datetime | None:
        """When a sleep or a wait for events' timeout falls due, as last read; None when nothing will wake it."""
        row = self.run
        return row.wake_at if row.status == RunStatus.WAITING else None

    @property
    def waiting_events(self) -> tuple[str, ...]:
        """The event names a procedure waiting for events waits for, as last read; () otherwise."""
        row = self.run
        if row.status != RunStatus.WAITING or row.waiting_for != "event":
            return ()
        return tuple(row.waiting_events or ())

    def send_event(self, name: str, payload: Any = None, *, key: str | None = None) -> Any:
        """Send an event to this procedure: :func:`django_procedures.send_event`."""
        from django_procedures.store.inbox import send

        return send(self.id, name, payload, key=key)

    def wait(self, timeout: float | None = None, *, poll: float = 0.05) -> RunStatus:
        """Block until the procedure is final and return its status; ``TimeoutError`` after ``timeout`` s.

        On PostgreSQL (with ``LISTEN_NOTIFY`` on) it listens on a connection of
        its own (to ``LISTEN_DATABASE`` when that is set) and is woken by the
        procedure's final transition; elsewhere (and behind a transaction
        pooler without ``LISTEN_DATABASE``) it polls, starting every ``poll``
        seconds and backing off to every second.

        ``timeout`` is a number of seconds, at least 0; ``None`` or
        ``math.inf`` waits for ever. NaN or a negative timeout is a ``ValueError``.
        """
        timeout = checked_timeout(timeout, poll)
        deadline = None if timeout is None else time.monotonic() + timeout
        from django_procedures.store.awaiting import FinishListener

        listener = FinishListener.open(self.id)  # before the first read: a transition in between is heard
        try:
            delay = poll
            while True:
                if self.refresh().is_finished:
                    return self.status
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"procedure {self.id} is still {self.status} after {timeout} seconds")
                if listener is not None:
                    if listener.wait(min(RECHECK_SECONDS, left or RECHECK_SECONDS)):
                        continue
                    listener = None  # the connection broke: poll from here on
                time.sleep(delay if left is None else max(0.0, min(delay, left)))
                delay = min(delay * 1.5, 1.0)
        finally:
            if listener is not None:
                listener.close()

    async def await_result(self, timeout: float | None = None, *, poll: float = 0.05) -> RunStatus:
        """``wait()`` for async code: wait until the procedure is final and return its status.

        Then read ``output`` or ``error`` (they hold what this wait read last).
        Listens with an async connection on PostgreSQL, so it holds no thread
        while it waits. ``timeout`` is checked as ``wait()`` checks it.
        """
        timeout = checked_timeout(timeout, poll)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        from django_procedures.store.awaiting import AsyncFinishListener

        listener = await AsyncFinishListener.open(self.id)
        try:
            delay = poll
            while True:
                if (await self.arefresh()).is_finished:
                    return self.status
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    raise TimeoutError(f"procedure {self.id} is still {self.status} after {timeout} seconds")
                if listener is not None:
                    if await listener.wait(min(RECHECK_SECONDS, left or RECHECK_SECONDS)):
                        continue
                    listener = None  # the connection broke: poll from here on
                await asyncio.sleep(delay if left is None else max(0.0, min(delay, left)))
                delay = min(delay * 1.5, 1.0)
        finally:
            if listener is not None:
                await listener.close()

    def cancel(self, *, by: str = "") -> Any:
        """Cancel this procedure and its unfinished subtree; returns a ``CancelResult`` saying what changed."""
        from django_procedures.store import operations

        self._row = None
        return operations.cancel(self.id, by=by)

    def retry(self, *, by: str = "") -> None:
        """Retry a failed procedure from its last checkpoint (see ``store.operations.retry``).

        A child is retried only while its parent waits for it, and a scheduled run only into a free slot;
        a parent failed by its children retries them with it and waits for them; otherwise
        ``InvalidOperation`` says why and what to do instead.
        """
        from django_procedures.store import operations

        operations.retry(self.id, by=by)
        self._row = None

    def rerun(self, from_step: str | None = None, *, by: str = "") -> ProcedureHandle:
        """Start a new run of this final procedure from ``from_step`` (None: the first step, with the submitted
        state) with the state committed just before that step; the handle of the new run.

        The new run is linked to this one (``ProcedureRun.rerun_of``; this one's ``reruns``); it keeps the
        queue, priority and lock keys, takes no idempotency key, parent or schedule. ``from_step`` may be an
        old name listed in ``renamed_steps``. A ``ValueError`` saying why, and nothing written, for a procedure
        that is not final, a step the type does not have or the run never reached, or a class of a lower
        version than the run's. See docs/changing-procedures.md, "Re-running from a step".
        """
        from django_procedures.store import rerun

        return ProcedureHandle(rerun.rerun(self.id, from_step, by=by), created=True)


def checked_timeout(timeout: float | None, poll: float) -> float | None:
    """``timeout`` of a wait, ``None`` for infinity; ``ValueError``/``TypeError`` saying what to pass."""
    for name, value in (("timeout", timeout), ("poll", poll)):
        if value is None and name == "timeout":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"{name} must be a number of seconds; got {type(value).__name__} {value!r}")
    if timeout is not None and not timeout >= 0:  # NaN fails every comparison: it would never time out
        raise ValueError(f"timeout must be a number of seconds of at least 0, or None to wait for ever; "
                         f"got {timeout!r}")
    if not 0 < poll < math.inf:
        raise ValueError(f"poll must be a positive, finite number of seconds; got {poll!r}")
    return None if timeout == math.inf else timeout


def get_handle(procedure_id: uuid.UUID | str) -> ProcedureHandle:
    """A handle for an existing procedure; ``LookupError`` if there is none."""
    from django_procedures.models import ProcedureRun

    handle = ProcedureHandle(procedure_id)
    if not ProcedureRun.objects.filter(id=handle.id).exists():
        raise LookupError(f"no procedure has the id {procedure_id}")
    return handle


async def aget_handle(procedure_id: uuid.UUID | str) -> ProcedureHandle:
    """``get_handle()`` for async code."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(get_handle)(procedure_id)
