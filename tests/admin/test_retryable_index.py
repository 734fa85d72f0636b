"""The admin's "retryable failures" list and its capped count read one range of a partial index, newest first."""

from __future__ import annotations

import pytest
from django.utils import timezone

from django_procedures.admin.filters import RetryableFilter
from django_procedures.models import ProcedureRun
from tests.plans import plan_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture(autouse=True)
def history(analyze) -> None:
    """Statistics of a table where retryable failures are few among many done runs and failures that cannot be
    retried (the case the index is for)."""
    now = timezone.now()
    rows = [ProcedureRun(type_name="emails.SendReceipt", status="done", run_at=now) for _ in range(2_000)]
    rows += [ProcedureRun(type_name="crm.Sync", status="failed", run_at=now, error="boom") for _ in range(1_000)]
    rows += [ProcedureRun(type_name="billing.ChargeInvoice", status="failed", failure_can_retry=True, run_at=now,
                          error="boom") for _ in range(20)]
    ProcedureRun._writer.bulk_create(rows, batch_size=1_000)
    analyze()


def _retryable():
    """The rows the filter selects, as the admin's list asks for them."""
    chosen = RetryableFilter(None, {"retryable": ["yes"]}, ProcedureRun, None)
    return chosen.queryset(None, ProcedureRun.objects.all())


def test_the_filter_selects_exactly_the_failures_a_manual_retry_would_run_again():
    assert set(_retryable().values_list("type_name", flat=True)) == {"billing.ChargeInvoice"}
    assert _retryable().count() == 20


def test_retryable_failures_newest_first_read_the_retryable_index_without_a_sort():
    plan = plan_of(_retryable().order_by("-created_at", "-id")[:50], "seqscan", "bitmapscan")
    assert "procedures_retryable_idx" in plan, plan
    assert "Sort" not in plan, plan


def test_their_capped_count_reads_only_the_retryable_index():
    plan = plan_of(_retryable().order_by().values("id")[:10_001], "seqscan", "bitmapscan")
    assert "Index Only Scan using procedures_retryable_idx" in plan, plan
