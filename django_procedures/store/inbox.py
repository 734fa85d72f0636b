"""Events: sending them (``send_event``), a wait taking them (``Status.wait_for_event``), and reading them.

A send and the settle of a wait both lock the procedure's row before they
read or write its events: a send commits wholly before the wait's check or
wholly after its write, so an event is never sent between the two unseen (no
lost wake-up). An event that matches the current wait is consumed by the send
itself, which makes the procedure ready and NOTIFYs its queue in the sender's
transaction; one sent earlier is taken, oldest first, when a wait begins.
The timeout of a wait is its ``wake_at``: ``store.timers.wake_due`` wakes it
like a sleeper, and the next step then finds no event (``ctx.event`` is None).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from django_procedures import clock
from django_procedures.exceptions import EventNotDelivered
from django_procedures.models import Event, ProcedureRun, Step
from django_procedures.policy.events import check_key, check_name, encode_payload
from django_procedures.policy.state import text_problem
from django_procedures.policy.status import FINAL, LeaseOutcome, RunStatus
from django_procedures.policy.waiting import WaitingFor
from django_procedures.store.claim import Claim
from django_procedures.store.fence import LEASE_CLEARED, StepRecord, close_lease, fenced_update, held_row, lost
from django_procedures.store.final import joined
from django_procedures.store.notify import notify
from django_procedures.store.transitions import _committed, _done_rows, _progress_fields

logger = logging.getLogger("django_procedures.events")

#: What leaving a wait for events clears on the run.
_WAIT_CLEARED: dict[str, Any] = {"waiting_for": "", "wake_at": None, "waiting_events": None}


@dataclass(frozen=True)
class ReceivedEvent:
    """``ctx.event``: the event the wait before this step took."""

    name: str
    payload: Any
    sent_at: datetime
    sent_by: str


@dataclass(frozen=True)
class Sent:
    """What a send did: the event's id, and whether the procedure's current wait took it at once."""

    event_id: int
    procedure_id: uuid.UUID
    name: str
    #: The procedure waited for this name: the event is consumed and the procedure is ready.
    delivered: bool
    #: The ``key`` named an event sent before: that one is returned, nothing was written.
    duplicate: bool = False
    #: The procedure's status after the send.
    status: str = ""


def send(procedure: uuid.UUID | str, name: str, payload: Any = None, *, key: str | None = None, sent_by: str = "",
         max_bytes: int | None = None, max_unconsumed: int | None = None) -> Sent:
    """Send event ``name`` to ``procedure`` (an id, or the procedure's idempotency key) in the caller's transaction.

    ``TypeError``/``ValueError`` for a bad name, key or payload;
    :class:`~django_procedures.exceptions.EventNotDelivered` for an unknown or
    final procedure, or one holding ``max_unconsumed`` unconsumed events. The
    limits default to ``PROCEDURES["MAX_EVENT_BYTES"]`` and ``["MAX_UNCONSUMED_EVENTS"]``.
    """
    from django_procedures.conf import conf

    check_name(name)
    key = check_key(key)
    max_bytes = conf.MAX_EVENT_BYTES if max_bytes is None else max_bytes
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ImproperlyConfigured(f"PROCEDURES['MAX_EVENT_BYTES'] must be an integer of at least 1 (bytes); "
                                   f"got {max_bytes!r}")
    encode_payload(payload, max_bytes)
    limit = conf.MAX_UNCONSUMED_EVENTS if max_unconsumed is None else max_unconsumed
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ImproperlyConfigured(f"PROCEDURES['MAX_UNCONSUMED_EVENTS'] must be an integer of at least 1; "
                                   f"got {limit!r}")
    with joined():
        row = _locked(procedure)
        if row is None:
            raise EventNotDelivered(f"send_event: no procedure has the id or key {str(procedure)!r}",
                                    reason="unknown")
        pid, status, waiting_for, names, step, step_name, queue = row
        if key is not None:  # before the final check: a retried delivery after the procedure ended is harmless too
            earlier = Event._writer.filter(procedure_id=pid, key=key).values_list("id", "name", "consumed_at").first()
            if earlier is not None:
                return Sent(earlier[0], pid, earlier[1], delivered=False, duplicate=True, status=status)
        if status in FINAL:
            raise EventNotDelivered(f"send_event: procedure {pid} is {status}; it takes no more events",
                                    reason="final", procedure_id=pid)
        if Event._writer.filter(procedure_id=pid, consumed_at__isnull=True)[:limit].count() >= limit:
            raise EventNotDelivered(
                f"send_event: procedure {pid} already has {limit} events that no wait has taken "
                "(PROCEDURES['MAX_UNCONSUMED_EVENTS']); it must consume some before it takes more",
                reason="full", procedure_id=pid)
        now = clock.now()
        takes = status == RunStatus.WAITING and waiting_for == WaitingFor.EVENT and name in (names or ())
        event = Event._writer.create(procedure_id=pid, name=name, payload=payload, key=key, sent_at=now,
                                     sent_by=sent_by, consumed_at=now if takes else None,
                                     consumed_step=step if takes else None, consumed_by=step_name if takes else "")
        if takes:
            ProcedureRun._writer.filter(id=pid).update(status=RunStatus.READY, run_at=now, **_WAIT_CLEARED)
            notify([queue])
            status = RunStatus.READY
    logger.info("event %s sent to procedure %s%s", name, pid, " (its wait took it)" if takes else "",
                extra={"procedure_id": str(pid)})
    return Sent(event.id, pid, name, delivered=takes, status=status)


def _locked(procedure: uuid.UUID | str) -> tuple[Any, ...] | None:
    """The procedure's row, locked: by id when ``procedure`` is one, else (or when no id matches) by key."""
    fields = ("id", "status", "waiting_for", "waiting_events", "step", "step_name", "queue")
    rows = ProcedureRun._writer.select_for_update()
    as_id = _as_uuid(procedure)
    if as_id is not None:
        row = rows.filter(id=as_id).values_list(*fields).first()
        if row is not None or isinstance(procedure, uuid.UUID):
            return row
    if text_problem(str(procedure)):  # no key holds a NUL or a lone surrogate (submit refuses them); PostgreSQL
        return None                   # would raise DataError on the lookup, where SQLite found nothing
    return rows.filter(key=str(procedure)).values_list(*fields).first()


def _as_uuid(value: uuid.UUID | str) -> uuid.UUID | None:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def wait(claim: Claim, records: Sequence[StepRecord], state: dict[str, Any], next_step: str,
         names: Sequence[str], wake_at: datetime | None, progress: dict[str, Any] | None = None) -> None:
    """Checkpoint and wait for one of the events ``names`` until ``wake_at`` (None: no timeout), in one transaction.

    The lease ends and the lock keys stay held. The oldest event of those
    names already sent is taken at once (the procedure is then ``ready``);
    otherwise it is ``waiting`` for events.
    """
    step = records[-1].index + 1
    with joined():
        # The row lock first: a send to this procedure is serialised with this check (see the module).
        if held_row(claim).select_for_update().values_list("id", flat=True).first() is None:
            raise lost(claim)
        now = clock.now()
        sent = (Event._writer.filter(procedure_id=claim.id, consumed_at__isnull=True, name__in=list(names))
                .order_by("id").values_list("id", flat=True).first())
        common = {"state": state, "step": step, "step_name": next_step, "attempt": 1, "failures": 0, "lost": 0,
                  **LEASE_CLEARED, **_progress_fields(progress, now)}
        if sent is not None:
            Event._writer.filter(id=sent).update(consumed_at=now, consumed_step=step, consumed_by=next_step)
            fenced_update(claim, status=RunStatus.READY, run_at=now, **_WAIT_CLEARED, **common)
        else:
            fenced_update(claim, status=RunStatus.WAITING, waiting_for=WaitingFor.EVENT, waiting_events=list(names),
                          wake_at=wake_at, run_at=wake_at or now, **common)
        Step._writer.bulk_create(_done_rows(claim, records, state))
        close_lease(claim.id, claim.lease_token, LeaseOutcome.COMPLETED, queue=claim.queue)
        notify([claim.queue])  # ready now, or a new timeout idle workers must read
    _committed(claim, records)


def received(procedure_id: Any, step: int) -> ReceivedEvent | None:
    """The event the wait before step ``step`` took, or None (it timed out, or the step follows no wait)."""
    row = (Event.objects.filter(procedure_id=procedure_id, consumed_step=step, consumed_at__isnull=False)
           .order_by("-id").values_list("name", "payload", "sent_at", "sent_by").first())
    return None if row is None else ReceivedEvent(*row)


def history(procedure_id: Any, limit: int = 100) -> list[Event]:
    """A procedure's events, the newest ``limit`` of them, oldest first (the admin's event history)."""
    return list(reversed(Event.objects.filter(procedure_id=procedure_id).order_by("-id")[:limit]))


def unconsumed_count(procedure_id: Any) -> int:
    return Event.objects.filter(procedure_id=procedure_id, consumed_at__isnull=True).count()


__all__ = ["ReceivedEvent", "Sent", "history", "received", "send", "unconsumed_count", "wait"]
