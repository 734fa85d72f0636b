"""The admin's list filtered by a failed status and a type, and its capped count, read one partial index range."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from django_procedures.models import ProcedureRun

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def _plan(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a table this small would be read whole anyway
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.parametrize("status", ["failed", "rolled_back", "cancelled"])
def test_one_types_failures_newest_first_read_the_failed_by_type_index(status):
    rows = ProcedureRun.objects.filter(status=status, type_name="billing.ChargeInvoice").order_by("-created_at", "-id")
    plan = _plan(rows[:50])
    assert "procedures_failed_type_idx" in plan, plan
    assert "Sort" not in plan, plan


def test_their_capped_count_reads_the_failed_by_type_index():
    ids = ProcedureRun.objects.filter(status="failed", type_name="billing.ChargeInvoice").order_by().values("id")
    assert "procedures_failed_type_idx" in _plan(ids[:10_001]), _plan(ids[:10_001])
