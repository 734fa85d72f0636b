"""The schedule verbs users call, each defined here (the package root exports them from this module).

Defining schedules: ``register_schedule``, ``declare_schedule``; ticking them:
``tick``; the operations (the admin's actions, as functions): trigger now,
pause, resume, delete. The store functions behind them are internal.

An operation is given a schedule as a ``Schedule``, its name, or its primary
key. Each runs in its own transaction under the schedule's row lock, and
raises ``InvalidOperation`` (naming the schedule) when there is no such
schedule or the operation does not apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_procedures.models import Schedule
    from django_procedures.procedure import Procedure
    from django_procedures.store.operations import Deleted
    from django_procedures.store.ticks import TickReport


def register_schedule(name: str, procedure: type[Procedure] | str, *, mode: str = "fixed_rate",
                      period: timedelta | float | None = None, cron: str | None = None, max_concurrency: int = 1,
                      missed: str = "skip", max_pending: int = 0, initial_delay: timedelta | float = timedelta(0),
                      max_run_time: timedelta | float | None = None, state: Mapping[str, Any] | None = None,
                      enabled: bool = True, timezone: str | None = None, queue: str = "",
                      update: bool = False) -> tuple[Schedule, bool]:
    """Create the schedule ``name``, or return the stored one (changed only with ``update=True``).

    A stored definition that differs from this one is logged, so a change in
    code is never silently ignored. Durations are ``timedelta`` values or
    numbers of seconds. An argument of the wrong type raises ``TypeError``
    saying what to pass; bad settings raise ``ValidationError`` with messages
    that say what to change.
    """
    from django_procedures.store import schedules

    return schedules.register_definition(name, procedure, mode=mode, period=period, cron=cron,
                                         max_concurrency=max_concurrency, missed=missed, max_pending=max_pending,
                                         initial_delay=initial_delay, max_run_time=max_run_time, state=state,
                                         enabled=enabled, timezone=timezone, queue=queue, update=update)


def declare_schedule(name: str, procedure: type[Procedure] | str, **options: Any) -> None:
    """Declare a schedule in code (for example in ``procedures.py``); it is written to the database on
    ``post_migrate`` and at worker start, never at import. Takes ``register_schedule``'s options."""
    from django_procedures.store import schedules

    schedules.declare(name, procedure, options)


def tick(now: datetime | None = None, *, batch_size: int = 1000) -> TickReport:
    """Run one scheduling pass at ``now`` (the injectable clock) over every due, enabled schedule.

    Due schedules are locked with ``FOR UPDATE SKIP LOCKED``, so concurrent
    tickers (threads, processes, two beats) share the work, and each run
    carries its schedule and tick time under a unique constraint, so a tick
    never starts twice. Each batch of ``batch_size`` schedules is one
    transaction with a fixed number of statements whatever its size.

    A schedule this process cannot tick (its cadence raises, its procedure type
    is not registered, its values cannot be written) gets the error recorded on
    its row and is passed over; the others tick as usual. Runs past their
    schedule's ``max_run_time`` are cancelled first (every worker's maintenance
    pass does it too). Returns a ``TickReport``: counts of the schedules
    ticked and the runs started, pending, skipped, overlapping and timed out,
    and the errors.
    """
    from django_procedures.store import ticks

    return ticks.run_pass(now, batch_size=batch_size)


def trigger_schedule(schedule: Schedule | str | int) -> dict[str, int]:
    """Start a tick now, obeying the concurrency bound and the missed-tick policy like any other tick.

    Returns ``{"started": n, "pending": n, "skipped": n}``. The cadence does
    not move. A paused schedule refuses it ("resume it first").
    """
    from django_procedures.store import schedules

    return schedules.trigger(schedule)


def pause_schedule(schedule: Schedule | str | int, *, reason: str = "paused") -> None:
    """Disable the schedule, recording ``reason``; runs already started go on, pending ticks wait."""
    from django_procedures.store import schedules

    schedules.pause(schedule, reason=reason)


def resume_schedule(schedule: Schedule | str | int) -> None:
    """Enable the schedule again; its next tick is due now (a paused stretch counts as one tick, not a burst)."""
    from django_procedures.store import schedules

    schedules.resume(schedule)


def delete_schedule(schedule: Schedule | str | int, *, by: str = "") -> Deleted:
    """Delete the schedule: its unfinished runs are cancelled (with their subtrees), its finished runs kept.

    Returns a ``Deleted`` (``name``, ``cancelled`` ids, ``kept`` count). ``by``
    is recorded in the cancelled runs' error. A schedule declared in code is
    created again at the next worker start or ``migrate`` unless its
    declaration is removed first.
    """

    from django_procedures.store import operations

    return operations.delete_schedule(schedule, by=by)
