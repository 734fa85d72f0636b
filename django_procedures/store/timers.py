"""Timers: waking sleeping procedures (``Status.sleep``) and waits for events past their timeout
(``Status.wait_for_event(..., timeout=...)``) when their ``wake_at`` has come.

The claim never looks at a sleeper: it reads the ready and retrying rows
only. A wake pass makes due sleepers ``ready`` (reading ``procedures_wake_idx``)
and NOTIFYs their queues; :func:`next_wake` tells an idle worker when to run
the next one. The worker runs a pass when a due time it waited for has come
and in its maintenance sweep; ``drain(now=T)`` runs one first and again whenever it finds nothing to claim.
Times are the injectable clock's (``django_procedures.clock``), as for ``run_at``.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import Min

from django_procedures import clock
from django_procedures.models import ProcedureRun
from django_procedures.policy.status import RunStatus
from django_procedures.policy.waiting import WaitingFor
from django_procedures.store.db import bound_cursor, is_postgresql
from django_procedures.store.notify import notify

#: Sleepers woken per statement: a burst of timers due at once is woken in several short transactions.
BATCH = 500

# SKIP LOCKED: a sleeper being cancelled right now is left to the cancel (and a second waker passes it by); a
# wait for events being sent one right now is left to the send, which takes its row lock first.
_PG_WAKE = f"""
    WITH due AS (
        SELECT id FROM {{run}}
        WHERE status = '{RunStatus.WAITING}' AND wake_at <= %(now)s
          AND waiting_for IN ('{WaitingFor.TIMER}', '{WaitingFor.EVENT}')
        ORDER BY wake_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    )
    UPDATE {{run}} AS r SET status = '{RunStatus.READY}', waiting_for = '', wake_at = NULL, waiting_events = NULL
    FROM due WHERE r.id = due.id
    RETURNING r.queue
"""


def wake_due(now: datetime | None = None, *, batch: int = BATCH) -> int:
    """Make every sleeper whose ``wake_at`` is at or before ``now`` (default: the clock's now) ready; how many.

    Each batch is one transaction that NOTIFYs the queues it made ready work in.
    Its ``run_at`` is its wake time, so it is claimed in wake order.
    """
    now = now or clock.now()
    woken = 0
    while True:
        count = wake_batch(now, batch=batch)
        woken += count
        if count < batch:
            return woken


def wake_batch(now: datetime | None = None, *, batch: int = BATCH) -> int:
    """Make up to ``batch`` sleepers due at ``now`` (default: the clock's now) ready, earliest first, in one
    transaction that NOTIFYs their queues; how many. Fewer than ``batch``: none was left due (but for rows
    another transaction held, which it leaves as they are)."""
    now = now or clock.now()
    with transaction.atomic():
        if is_postgresql():
            with bound_cursor() as cursor:
                cursor.execute(_PG_WAKE.format(run=ProcedureRun._meta.db_table), {"now": now, "limit": batch})
                queues = [row[0] for row in cursor.fetchall()]
        else:  # one writer at a time: what this transaction reads is what it updates
            due = list(ProcedureRun._writer.filter(status=RunStatus.WAITING, wake_at__lte=now,
                                                   waiting_for__in=[WaitingFor.TIMER, WaitingFor.EVENT])
                       .order_by("wake_at")
                       .values_list("id", "queue")[:batch])
            ProcedureRun._writer.filter(id__in=[pid for pid, _ in due]).update(
                status=RunStatus.READY, waiting_for="", wake_at=None, waiting_events=None)
            queues = [queue for _, queue in due]
        notify(queues)
    return len(queues)


def next_wake() -> datetime | None:
    """The earliest ``wake_at`` of a waiting procedure (read from ``procedures_wake_idx``), or None."""
    return (ProcedureRun._writer.filter(status=RunStatus.WAITING, wake_at__isnull=False)
            .aggregate(at=Min("wake_at"))["at"])


__all__ = ["BATCH", "next_wake", "wake_batch", "wake_due"]
