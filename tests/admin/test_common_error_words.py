"""A search for words that many errors contain walks the errors newest first (PostgreSQL); a rare one keeps the
trigram index. Either way the page holds the newest matches, in list order."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_procedures.admin.changelist import COUNT_CAP, newest_matches_first
from django_procedures.models import ProcedureRun
from tests.admin.helpers import changelist_url

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

ERROR_ROWS_INDEX = "procedures_error_created_idx"  # the procedures with an error, newest first
TURNED_OFF = "SET LOCAL enable_bitmapscan = off"


def seed(common: int, rare: int = 3) -> None:
    """``common`` failures saying "upstream timed out" (one a second, going back) and ``rare`` newer ones
    saying "card declined"; done rows between them."""
    now = timezone.now()
    rows = [ProcedureRun(type_name="billing.Charge", status="failed" if i % 2 else "rolled_back", run_at=now,
                         created_at=now - timedelta(seconds=i), error=f"TimeoutError: upstream timed out ({i})")
            for i in range(common)]
    rows += [ProcedureRun(type_name="billing.Charge", status="failed", run_at=now,
                          created_at=now + timedelta(seconds=i),
                          error="NonRetryable: card declined") for i in range(rare)]
    rows += [ProcedureRun(type_name="billing.Charge", status="done", run_at=now, created_at=now - timedelta(seconds=i))
             for i in range(0, common, 10)]
    ProcedureRun._writer.bulk_create(rows, batch_size=5_000)
    # No ANALYZE: the row count it writes to pg_class outlives the test's rollback and changes other tests' plans.


def listed(client, query: str) -> tuple[list[str], list[str]]:
    """The errors of the list's page, and the SQL it ran."""
    with CaptureQueriesContext(connection) as captured:
        response = client.get(changelist_url(query))
    assert response.status_code == 200
    return [r.error for r in response.context["cl"].result_list], [q["sql"] for q in captured]


def test_common_words_walk_the_errors_newest_first_and_list_the_newest_matches(operator_client):
    seed(COUNT_CAP + 500)
    errors, sql = listed(operator_client, "q=upstream+timed")
    assert TURNED_OFF in sql
    assert errors == [f"TimeoutError: upstream timed out ({i})" for i in range(50)]  # the page: newest first
    second, _ = listed(operator_client, "q=upstream+timed&p=2")
    assert second == [f"TimeoutError: upstream timed out ({i})" for i in range(50, 100)]


def test_rare_words_keep_the_trigram_index(operator_client):
    seed(2_000)
    errors, sql = listed(operator_client, "q=card+declined")
    assert TURNED_OFF not in sql
    assert errors == ["NonRetryable: card declined"] * 3


def test_a_list_sorted_by_another_column_keeps_the_planner_s_choice(operator_client):
    seed(COUNT_CAP + 500)
    errors, sql = listed(operator_client, "q=upstream+timed&o=3")
    assert TURNED_OFF not in sql
    assert len(errors) == 50


def test_the_walk_reads_the_error_index_and_puts_the_setting_back():
    seed(COUNT_CAP + 500)
    queryset = (ProcedureRun.objects.filter(error__icontains="upstream", status__in=["failed", "rolled_back"])
                .exclude(error="").order_by("-created_at", "-id")[:100])
    with transaction.atomic(), connection.cursor() as cursor:
        sql, params = queryset.query.sql_with_params()
        cursor.execute(TURNED_OFF)
        # A table this small, without statistics, would be read whole or sorted anyway: what is checked here is
        # that the index can give the list's order to this query (its predicate follows from the query's).
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("SET LOCAL enable_bitmapscan = on")
        cursor.execute("SET LOCAL enable_seqscan = on")
        cursor.execute("SET LOCAL enable_sort = on")
        assert ERROR_ROWS_INDEX in plan and "Bitmap" not in plan, plan
        assert len(newest_matches_first(queryset)) == 100
        cursor.execute("SELECT current_setting('enable_bitmapscan')")
        assert cursor.fetchone()[0] == "on"  # the caller's transaction keeps its plans
