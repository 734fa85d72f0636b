"""``ctx.progress()``: a step's reports, carried by the claim's checkpoints or, throttled per procedure, written
outside the step's transaction.

In a worker on PostgreSQL each executor thread writes progress on a second
connection of its own (opened when first needed), in autocommit, and the
heartbeat on its own: a report is visible while an atomic step's transaction
is still open, and a step that fails keeps the progress it reported. Elsewhere (SQLite, which allows one
writer at a time, and ``drain()``, which runs on the caller's connection) the
report is written on the step's own connection: inside an atomic step it
commits (or rolls back) with the step.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from django_procedures import clock
from django_procedures.policy.progress import MIN_INTERVAL, Report, normalise
from django_procedures.store import progress as store

logger = logging.getLogger("django_procedures.worker")

_side = threading.local()


def _side_connection() -> Any:
    """This thread's second connection (created on first use), for writes that must not join its transaction."""
    conn = getattr(_side, "connection", None)
    if conn is None:
        conn = _side.connection = connections.create_connection(DEFAULT_DB_ALIAS)
    return conn


def close_side_connection() -> None:
    conn = getattr(_side, "connection", None)
    if conn is not None:
        _side.connection = None
        conn.close()


class ProgressRecorder:
    """The progress reports of one claim: at most one write of their own per :data:`MIN_INTERVAL` s, the latest kept.

    The interval starts when the claim starts running. A report within the
    interval is held back; the write that commits the claim's steps (a
    checkpoint, a suspension, the completion) takes it along (:meth:`take`:
    the same statement, no write of its own), so a procedure whose steps end
    within the interval writes no report of its own. Otherwise the next report
    after the interval writes it, and so does the end of a step that no such
    write follows (within a group of ``persist=False`` steps), or, in a worker
    on PostgreSQL, the heartbeat (every ``lease_seconds / 3``). An attempt
    that fails writes a held-back report at once. Reports come from one
    executor thread; the heartbeat may write concurrently, so writes are
    serialised by a lock.
    """

    def __init__(self, claim: Any, *, side_connection: bool = False) -> None:
        self.claim = claim
        self.side_connection = side_connection
        self.pending: Report | None = None
        self.writes = 0
        self._written_at = time.monotonic()
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def report(self, done: Any, total: Any, note: Any, log: logging.LoggerAdapter[logging.Logger], *,
               write: bool = True) -> None:
        """Never raises for a bad report, a lost lease or a database error: progress must not fail a step.

        ``write=False`` (an async step, on the event loop): held back whatever the interval.
        """
        value, problems = normalise(done, total, note)
        for problem in problems:
            kind = problem.split(";")[0]
            if kind not in self._warned:  # once per claim and kind: a loop must not flood the log
                self._warned.add(kind)
                log.warning(problem)
        if value is None:
            return
        with self._lock:
            self.pending = value
            if write:
                self._write_if_due(own_connection=not self.side_connection)

    def step_ended(self) -> None:
        """Between steps of a ``persist=False`` group (no checkpoint to carry it): write a held-back report if the
        interval has passed."""
        with self._lock:
            self._write_if_due(own_connection=not self.side_connection)

    def from_heartbeat(self) -> None:
        """On the heartbeat thread (its own connection): write a report held back longer than the interval.

        Only in a worker on PostgreSQL: on SQLite the heartbeat must never wait
        for the write lock an atomic step holds.
        """
        if self.side_connection and self.pending is not None:
            with self._lock:
                self._write_if_due(own_connection=True)

    def take(self, *, if_due: bool = False) -> dict[str, Any] | None:
        """The held-back report (as stored), for the write that commits the claim's steps to carry; None if none.

        That write (``store.transitions`` checkpoint, suspension, completion)
        is fenced like any other, so a report it carries is written exactly
        when it is, in the same statement: no statement or commit of its own.
        Taken, the report is no longer held back (the heartbeat will not write
        it as well), and the interval starts again. ``if_due`` (a checkpoint):
        only once the interval has passed, so that short steps do not send a
        report with every checkpoint; the suspension or completion that ends
        the claim takes it whatever the interval.
        """
        if self.pending is None:  # the executor thread is the only one that sets it: no lock needed to look
            return None
        if if_due and not self._due():
            return None
        with self._lock:
            value, self.pending = self.pending, None
            self._written_at = time.monotonic()
        return None if value is None else value.as_json()

    def before_failure(self) -> None:
        """An attempt failed: a held-back report is written at once (outside the step's rolled-back work)."""
        with self._lock:
            if self.pending is not None:
                self._write(own_connection=not self.side_connection)

    def _due(self) -> bool:
        """Whether the interval since the last write (or the claim's start) has passed."""
        return time.monotonic() - self._written_at >= MIN_INTERVAL

    def _write_if_due(self, *, own_connection: bool) -> None:
        if self.pending is not None and self._due():
            self._write(own_connection=own_connection)

    def _write(self, *, own_connection: bool) -> None:
        """Under ``self._lock``: write the pending report, fenced, on this thread's or the side connection."""
        value, self.pending = self.pending, None
        if value is None:
            return
        self._written_at = time.monotonic()
        try:
            if not own_connection:
                held = store.record(self.claim, value.as_json(), clock.now(), using=_side_connection())
            elif connection.in_atomic_block:  # the step's transaction: a savepoint keeps a failure out of it
                with transaction.atomic():
                    held = store.record(self.claim, value.as_json(), clock.now())
            else:
                held = store.record(self.claim, value.as_json(), clock.now())
        except Exception as error:  # the step carries on; its checkpoint will meet the same database
            if not own_connection:
                close_side_connection()
            if "error" not in self._warned:
                self._warned.add("error")
                logger.warning("procedure %s: could not write its progress: %s", self.claim.id, error)
            return
        self.writes += 1
        if not held:
            logger.debug("procedure %s: progress not written: lease token %s no longer holds it", self.claim.id,
                         self.claim.lease_token)
