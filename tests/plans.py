"""The plan PostgreSQL chooses for a queryset, for the tests of the indexes the admin and the store read."""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction


def plan_of(queryset: Any, *turned_off: str) -> str:
    """``EXPLAIN`` of ``queryset`` with the planner's ``enable_<name>`` settings in ``turned_off`` off for it alone
    (a test table is so small that PostgreSQL would read it whole, or sort it, whatever the indexes)."""
    sql, params = queryset.query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        for name in turned_off:
            cursor.execute(f"SET LOCAL enable_{name} = off")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())
