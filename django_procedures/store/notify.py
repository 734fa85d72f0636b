"""Waking idle workers: one NOTIFY per queue per statement, delivered at commit."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from django_procedures.conf import conf
from django_procedures.store.db import is_postgresql

CHANNEL = "django_procedures"


def notify(queues: Iterable[str]) -> None:
    """Tell listening workers that work in ``queues`` became due (or its due time changed).

    PostgreSQL delivers the notification when the surrounding transaction
    commits and folds identical ones of one transaction into one.
    """
    names = sorted(set(queues))
    if not names or not is_postgresql() or not conf.LISTEN_NOTIFY:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, q) FROM unnest(%s::text[]) AS q", [CHANNEL, names])
