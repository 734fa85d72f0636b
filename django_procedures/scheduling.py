"""The schedule operations users call: trigger now, pause, resume, delete (the admin's actions, as functions).

A schedule is given as a ``Schedule``, its name, or its primary key. Each
operation runs in its own transaction under the schedule's row lock, and
raises ``InvalidOperation`` (naming the schedule) when there is no such
schedule or the operation does not apply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django_procedures.models import Schedule
    from django_procedures.store.operations import Deleted


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
