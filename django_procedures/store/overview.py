"""Operator reads shared by the admin, the Prometheus gauges and ``manage.py procedures``.

Each is a fixed number of queries, each bounded by an index range or a cap, so
they stay cheap beside ten million procedures. Nothing here writes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.db import connection, connections, transaction
from django.db.models import QuerySet
from django.utils import timezone

from django_procedures.models import ProcedureRun
from django_procedures.policy.status import CLAIMABLE, LEASED


def _table() -> str:
    return connection.ops.quote_name(ProcedureRun._meta.db_table)


def running_by_worker(worker_ids: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """What each worker holds a lease on now (``ProcedureRun.lease_owner``), oldest claim first.

    Reads only leased rows (the partial lease index), so it stays cheap however many procedures exist.
    """
    ids = sorted(set(worker_ids))
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if not ids:
        return found
    rows = (ProcedureRun.objects.filter(status__in=LEASED, lease_owner__in=ids)
            .order_by("started_at", "id").values("id", "type_name", "step_name", "lease_owner", "status"))
    for row in rows:
        found[row["lease_owner"]].append(row)
    return found


def counts_by_queue(status: str, cap: int) -> tuple[dict[str, int], bool]:
    """Procedures of ``status`` by queue, reading at most ``cap`` rows (the status index); and whether capped."""
    counts, capped = counts_by_type_and_queue(status, cap)
    by_queue: dict[str, int] = defaultdict(int)
    for (_type_name, queue), n in counts.items():
        by_queue[queue] += n
    return dict(by_queue), capped


def counts_by_type_and_queue(status: str, cap: int) -> tuple[dict[tuple[str, str], int], bool]:
    """Procedures of ``status`` by ``(type, queue)``, reading at most ``cap + 1`` rows of the status index;
    and whether there were more (the counts are then a floor)."""
    sql = (f"SELECT type_name, queue, COUNT(*) FROM (SELECT type_name, queue FROM {_table()} WHERE status = %s "
           "LIMIT %s) AS s GROUP BY type_name, queue")
    with connection.cursor() as cursor:
        cursor.execute(sql, [status, cap + 1])
        rows = {(type_name, queue): n for type_name, queue, n in cursor.fetchall()}
    return rows, sum(rows.values()) > cap


def oldest_due(now: datetime, cap: int) -> dict[str, datetime]:
    """Per queue, the ``run_at`` of its oldest due, unclaimed procedure, among the ``cap`` oldest due ones.

    Reads the due index in ``run_at`` order, so the oldest overall is always
    right; a queue none of whose due procedures is among the ``cap`` oldest is
    left out (its lag is smaller than every reported one).
    """
    placeholders = ", ".join(["%s"] * len(CLAIMABLE))
    sql = (f"SELECT queue, MIN(run_at) FROM (SELECT queue, run_at FROM {_table()} WHERE status IN ({placeholders}) "
           "AND run_at <= %s ORDER BY run_at LIMIT %s) AS s GROUP BY queue")
    field = ProcedureRun._meta.get_field("run_at")
    with connection.cursor() as cursor:
        cursor.execute(sql, [*sorted(CLAIMABLE), field.get_db_prep_value(now, connection), cap])
        rows = cursor.fetchall()
    return {queue: _aware(at) for queue, at in rows}


def _aware(value: Any) -> datetime:
    if isinstance(value, str):  # SQLite returns MIN() of a timestamp column as text
        value = datetime.fromisoformat(value)
    return value if timezone.is_aware(value) else timezone.make_aware(value, UTC)


def newest_matches_first(queryset: QuerySet[Any]) -> list[Any]:
    """A page of a search by words that many errors contain, read by walking the errors newest first.

    PostgreSQL cannot estimate how many rows ``LIKE '%words%'`` matches (it
    guessed one where 187,500 did), so it reads every match through the
    trigram index and sorts them all for the newest page (1.1 s beside ten
    million procedures). When the capped count has shown more than
    ``COUNT_CAP`` matches, bitmap scans are turned off for this one query
    (``SET LOCAL``, then put back): the planner then walks
    ``procedures_error_created_idx`` newest first and stops when the page is
    full. Fewer matches keep the trigram index, which is then the fast way.
    """
    connection = connections[queryset.db]
    with transaction.atomic(using=queryset.db), connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('enable_bitmapscan')")
        before = cursor.fetchone()[0]
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        try:
            return list(queryset)
        finally:  # a caller's transaction (ATOMIC_REQUESTS) goes on: its other queries keep their plans
            cursor.execute("SELECT set_config('enable_bitmapscan', %s, true)", [before])
