"""The procedures list: columns, filters, search, no full count, constant query count."""

import re
import uuid
from datetime import UTC, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_procedures.admin import changelist
from django_procedures.models import ProcedureRun
from django_procedures.testing import drain
from testproject.testapp.procedures import Flaky, Parent, Refuses, Sleeper, ThreeSteps
from tests.admin.helpers import changelist_url

pytestmark = pytest.mark.django_db


def ids_in(response) -> set[str]:
    """The procedures listed on a changelist page (their full ids, from the action checkboxes)."""
    return set(re.findall(r'name="_selected_action" value="([0-9a-f-]{36})"', response.content.decode()))


def test_the_list_shows_status_type_queue_step_attempts_age_and_error(operator_client):
    failed = Refuses.submit(queue="tenants")
    drain()
    ThreeSteps.submit()
    response = operator_client.get(changelist_url())
    html = response.content.decode()
    assert response.status_code == 200
    assert '<span class="proc-badge proc-failed">failed</span>' in html
    assert '<span class="proc-badge proc-ready">ready</span>' in html
    assert "testapp.Refuses" in html and "tenants" in html
    assert "1/1 · check" in html  # the failed step, of the class's one step
    assert "1/3 · one" in html  # ThreeSteps has not started
    assert "NonRetryable: the tenant does not exist" in html
    assert str(failed.id)[-8:] in html
    assert "2 procedures" in html  # a small table is counted exactly


def test_a_sleeping_procedure_says_until_when_in_the_list_and_on_its_page(operator_client):
    handle = Sleeper.submit({"seconds": timedelta(days=14).total_seconds()})
    drain()
    wake_at = handle.refresh().wake_at
    expected = f"sleeping until {wake_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC (in 1"  # 13d 23h or 14d
    html = operator_client.get(changelist_url()).content.decode()
    assert '<span class="proc-badge proc-waiting">waiting</span> <span class="proc-oneline">sleeping until' in html
    assert expected in html
    page = operator_client.get(f"{changelist_url()}{handle.id}/change/").content.decode()
    assert expected in page


def test_current_step_of_an_unknown_type_has_no_total(operator_client):
    handle = ThreeSteps.submit()
    ProcedureRun._writer.filter(id=handle.id).update(type_name="gone.Type")
    assert "1/? · one" in operator_client.get(changelist_url()).content.decode()


def test_filters_status_type_queue_retryable_and_roots(operator_client):
    refused = Refuses.submit()
    not_retryable = Refuses.submit({"manual_retry": False})
    parent = Parent.submit({"fanout": 2})
    drain()
    emails = ThreeSteps.submit(queue="emails")
    children = set(map(str, ProcedureRun.objects.filter(parent_id=parent.id).values_list("id", flat=True)))

    def listed(query):
        return ids_in(operator_client.get(changelist_url(query)))

    assert listed("status__exact=failed") == {str(refused.id), str(not_retryable.id)}
    assert listed("retryable=yes") == {str(refused.id)}
    assert listed("type_name=testapp.Parent") == {str(parent.id)}
    assert listed("queue=emails") == {str(emails.id)}
    assert listed("roots=yes") == {str(refused.id), str(not_retryable.id), str(parent.id), str(emails.id)}
    assert listed("roots=no") == children
    assert listed(f"root__id__exact={parent.id}") == children
    html = operator_client.get(changelist_url()).content.decode()
    for choice in ("?type_name=testapp.Refuses", "?queue=emails", "?retryable=yes", "?roots=yes"):
        assert choice in html


def test_search_by_id_key_type_and_error_text(operator_client):
    refused = Refuses.submit(key="tenant:acme")
    drain()
    three = ThreeSteps.submit()

    def found(term):
        return ids_in(operator_client.get(changelist_url(f"q={term}")))

    assert found(str(three.id)) == {str(three.id)}
    assert found("tenant:acme") == {str(refused.id)}
    assert found("threesteps") == {str(three.id)}
    assert found("tenant does not") == {str(refused.id)}
    assert found(str(uuid.uuid4())) == set()


def test_the_query_count_does_not_grow_with_the_rows_shown(operator_client):
    def queries_for(n):
        ProcedureRun._writer.all().delete()
        for _ in range(n // 5):  # five rows of four kinds: failed, retrying, ready, a parent with its child
            Refuses.submit()
            Flaky.submit({"fail_times": 1})
            ThreeSteps.submit()
            Parent.submit({"fanout": 1})
        drain()
        operator_client.get(changelist_url())  # warm caches (content types, permissions)
        with CaptureQueriesContext(connection) as captured:
            response = operator_client.get(changelist_url())
        assert response.status_code == 200
        assert len(ids_in(response)) == ProcedureRun.objects.count() == n  # one full page of 50 at most
        return len(captured)

    few, many = queries_for(5), queries_for(50)
    assert few == many


def test_the_list_never_counts_the_whole_table(operator_client, monkeypatch):
    monkeypatch.setattr(changelist.EstimatedCountPaginator, "cap", 3)
    for _ in range(5):
        ThreeSteps.submit()
    with CaptureQueriesContext(connection) as captured:
        html = operator_client.get(changelist_url("status__exact=ready")).content.decode()
    assert "more than 3 procedures" in html
    counts = [q["sql"] for q in captured if "COUNT(" in q["sql"].upper() and "procedurerun" in q["sql"]]
    assert counts and all("LIMIT 4" in sql for sql in counts)


def test_the_date_hierarchy_reads_min_and_max_never_distinct(operator_client):
    ThreeSteps.submit()
    with CaptureQueriesContext(connection) as captured:
        html = operator_client.get(changelist_url()).content.decode()
    assert not [q for q in captured if "DISTINCT" in q["sql"].upper()]
    year = ProcedureRun.objects.get().created_at.year
    assert f"created_at__year={year}" in html or "created_at__day=" in html
    response = operator_client.get(changelist_url(f"created_at__year={year}"))
    assert response.status_code == 200 and len(ids_in(response)) == 1


@pytest.mark.postgres
def test_unfiltered_on_postgresql_the_count_is_the_planners_estimate(operator_client, monkeypatch, analyze):
    monkeypatch.setattr(changelist.EstimatedCountPaginator, "cap", 3)
    for _ in range(8):
        ThreeSteps.submit()
    analyze()
    with CaptureQueriesContext(connection) as captured:
        html = operator_client.get(changelist_url()).content.decode()
    assert "about 8 procedures" in html
    assert not [q for q in captured if "COUNT(" in q["sql"].upper() and "procedurerun" in q["sql"]]
