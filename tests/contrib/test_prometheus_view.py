"""``django_procedures.contrib.prometheus``: the web process's gauges, who may read them, bounded queries."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_procedures import register_schedule
from django_procedures.models import ProcedureRun, Schedule, Worker
from django_procedures.store import workers
from django_procedures.store.claim import claim
from testproject.testapp.procedures import Heartbeat, ThreeSteps
from tests.admin.helpers import client_for, staff

pytestmark = pytest.mark.django_db


def url() -> str:
    return reverse("django_procedures_prometheus:metrics")


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def seed(n_ready: int = 3) -> None:
    for _ in range(n_ready):
        ThreeSteps.submit(queue="emails")
    old = ThreeSteps.submit(queue="reports")
    ProcedureRun._writer.filter(id=old.id).update(run_at=timezone.now() - timedelta(minutes=10))
    ThreeSteps.submit(queue="work")
    claim("w", type_names=[ThreeSteps.type_name], queues=["work"], limit=1, lease_seconds=30)
    workers.register(worker_id="a", hostname="h", pid=1, version="", queues=None, concurrency=1, lease_seconds=30)
    gone = workers.register(worker_id="b", hostname="h", pid=2, version="", queues=None, concurrency=1,
                            lease_seconds=30)
    Worker._writer.filter(id=gone).update(alive_until=timezone.now() - timedelta(seconds=5))
    schedule, _ = register_schedule("late", Heartbeat, period=timedelta(minutes=5))
    Schedule._writer.filter(id=schedule.id).update(next_tick_at=timezone.now() - timedelta(seconds=90),
                                                   last_drift_ms=1500)


def test_gauges_for_a_staff_user():
    seed()
    client = client_for(staff("op"))
    response = client.get(url())
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    got = samples(response.content.decode())
    assert got[("django_procedures_procedures", (("queue", "emails"), ("status", "ready")))] == 3
    assert got[("django_procedures_procedures", (("queue", "work"), ("status", "running")))] == 1
    assert got[("django_procedures_procedures_capped", (("status", "ready"),))] == 0
    assert 600 <= got[("django_procedures_oldest_due_seconds", (("queue", "reports"),))] < 3600
    assert 90 <= got[("django_procedures_schedule_lag_seconds", (("schedule", "late"),))] < 3600
    assert got[("django_procedures_schedule_drift_seconds", (("schedule", "late"),))] == 1.5
    assert got[("django_procedures_workers_alive", ())] == 1
    assert got[("django_procedures_workers", (("state", "gone"),))] == 1


def test_a_fixed_number_of_bounded_queries_whatever_the_rows(settings):
    settings.PROCEDURES = {"METRICS_COUNT_CAP": 2}
    seed(n_ready=5)
    client = client_for(staff("op"))
    client.get(url())
    with CaptureQueriesContext(connection) as captured:
        got = samples(client.get(url()).content.decode())
    assert got[("django_procedures_procedures_capped", (("status", "ready"),))] == 1
    assert got[("django_procedures_procedures", (("queue", "emails"), ("status", "ready")))] >= 2
    counts = [q["sql"] for q in captured if "django_procedures_procedurerun" in q["sql"]]
    assert len(counts) == 6 and all("LIMIT" in sql for sql in counts)  # five statuses, the due ages


def test_who_may_read(settings, client):
    assert client.get(url()).status_code == 403
    assert client_for(staff("op")).get(url()).status_code == 200
    settings.PROCEDURES = {"METRICS_TOKEN": "s3cret"}
    assert client.get(url(), HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
    refused = client.get(url(), HTTP_AUTHORIZATION="Bearer wrong")
    assert refused.status_code == 401 and refused["WWW-Authenticate"].startswith("Bearer")
    assert client.post(url(), HTTP_AUTHORIZATION="Bearer s3cret").status_code == 405


def test_limit_gauges_show_each_limit_in_use_and_its_max():
    from testproject.testapp.procedures import Limited

    for _ in range(3):
        Limited.submit({"concurrency": [["crm-api", 2]]})
    claim("w", type_names=[Limited.type_name], limit=5, lease_seconds=30)
    got = samples(client_for(staff("op")).get(url()).content.decode())
    assert got[("django_procedures_limit_in_use", (("limit", "crm-api"),))] == 2
    assert got[("django_procedures_limit_max", (("limit", "crm-api"),))] == 2


def test_the_worker_counts_claims_deferred_by_a_limit():
    from prometheus_client import generate_latest

    from django_procedures.runtime.metrics import WorkerMetrics
    from django_procedures.store import limits
    from testproject.testapp.procedures import Limited

    limits.deferrals.clear()
    for _ in range(3):
        Limited.submit({"concurrency": [["crm-api", 1]]})
    # One claim looks at all three: the first takes the slot, the other two are passed by.
    assert len(claim("w", type_names=[Limited.type_name], limit=5, lease_seconds=30)) == 1
    text = generate_latest(WorkerMetrics(lambda: 0).registry).decode()
    assert samples(text)[("django_procedures_claims_deferred_total", (("limit", "crm-api"),))] == 2
