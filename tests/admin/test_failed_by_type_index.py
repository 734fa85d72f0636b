"""The admin's list filtered by a failed status and a type, and its capped count, read one partial index range."""

from __future__ import annotations

import pytest
from django.utils import timezone

from django_procedures.models import ProcedureRun
from tests.plans import plan_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture(autouse=True)
def history(analyze) -> None:
    """Statistics of a table where one type's failures are few among many of other types (the case the index is
    for). Without statistics the plans would follow whatever row count an earlier test's ANALYZE left in pg_class."""
    now = timezone.now()
    kinds = ("failed", "rolled_back", "cancelled")
    rows = [ProcedureRun(type_name="emails.SendReceipt", status="done", run_at=now) for _ in range(1_000)]
    rows += [ProcedureRun(type_name=f"crm.Sync{i % 5}", status=status, run_at=now, error="boom")
             for i in range(1_000) for status in kinds]
    rows += [ProcedureRun(type_name="billing.ChargeInvoice", status=status, run_at=now, error="boom")
             for _ in range(10) for status in kinds]
    ProcedureRun._writer.bulk_create(rows, batch_size=1_000)
    analyze()


@pytest.mark.parametrize("status", ["failed", "rolled_back", "cancelled"])
def test_one_types_failures_newest_first_read_the_failed_by_type_index(status):
    rows = ProcedureRun.objects.filter(status=status, type_name="billing.ChargeInvoice").order_by("-created_at", "-id")
    plan = plan_of(rows[:50], "seqscan", "bitmapscan")
    assert "procedures_failed_type_idx" in plan, plan
    assert "Sort" not in plan, plan


def test_their_capped_count_reads_the_failed_by_type_index():
    ids = ProcedureRun.objects.filter(status="failed", type_name="billing.ChargeInvoice").order_by().values("id")
    plan = plan_of(ids[:10_001], "seqscan", "bitmapscan")
    assert "procedures_failed_type_idx" in plan, plan
