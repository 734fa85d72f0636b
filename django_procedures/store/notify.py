"""Waking idle workers: one NOTIFY per queue per statement, delivered at commit."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db import connection

from django_procedures.store.listening import listens

CHANNEL = "django_procedures"


def notify(queues: Iterable[str]) -> None:
    """Tell listening workers that work in ``queues`` became due (or its due time changed).

    PostgreSQL delivers the notification when the surrounding transaction
    commits and folds identical ones of one transaction into one.
    """
    names = sorted(set(queues))
    if not names or not listens():  # nobody listens: a NOTIFY would only take the notification lock at commit
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, q) FROM unnest(%s::text[]) AS q", [CHANNEL, names])

#: An awaited procedure that reached a final status NOTIFYs ``FINISHED_PREFIX`` + its id in hex (a trigger
#: sends it, migration 0005), so ``ProcedureHandle.wait()`` hears about its own procedure only.
FINISHED_PREFIX = "django_procedures_finished_"


def finished_channel(procedure_id: object) -> str:
    """The channel on which the final transition of ``procedure_id`` is announced (PostgreSQL)."""
    import uuid

    return FINISHED_PREFIX + (procedure_id if isinstance(procedure_id, uuid.UUID) else uuid.UUID(str(procedure_id))).hex


def mark_awaited(procedure_id: uuid.UUID | str) -> None:
    """Ask for the NOTIFY of ``procedure_id``'s final transition: a waiter listens for it (PostgreSQL).

    Only awaited rows notify, so completions nobody waits for never take the
    notification lock. Called after the waiter's LISTEN and before its read:
    a final transition that committed first is seen by that read; one that
    commits later updates the row this marked, and notifies.
    """
    from django_procedures.models import ProcedureRun
    from django_procedures.policy.status import FINAL

    (ProcedureRun._writer.filter(id=procedure_id, awaited=False).exclude(status__in=FINAL)
     .update(awaited=True))
