"""The dashboard: the last 24 hours by status, failing types, queue lag, live workers."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_procedures.admin.dashboard import dashboard_context
from django_procedures.models import ProcedureRun, Worker
from django_procedures.policy.workers import StopReason
from django_procedures.store import workers
from django_procedures.store.claim import claim
from django_procedures.testing import drain
from testproject.testapp.procedures import Flaky, Refuses, ThreeSteps
from tests.admin.helpers import dashboard_url

pytestmark = pytest.mark.django_db


def seed():
    """3 failed and 1 retrying; 2 due in emails (one for 7 minutes), 1 not due yet; 1 claimed by worker-a."""
    for _ in range(3):
        Refuses.submit()
    Flaky.submit({"fail_times": 1})
    drain()
    old = ThreeSteps.submit(queue="emails")
    ProcedureRun._writer.filter(id=old.id).update(run_at=timezone.now() - timedelta(minutes=7))
    ThreeSteps.submit(queue="emails")
    ThreeSteps.submit(run_after=timedelta(hours=1))
    ThreeSteps.submit(queue="work")
    claim("worker-a@host", type_names=[ThreeSteps.type_name], queues=["work"], limit=5, lease_seconds=30)


def test_dashboard_context():
    seed()
    context = dashboard_context(timezone.now())
    counts = dict(context["status_counts"])
    assert (counts["failed"], counts["retrying"], counts["ready"], counts["running"], counts["done"]) == (
        3, 1, 3, 1, 0)
    assert dict(context["unfinished_counts"])["ready"] == 3
    assert context["failing_types"][0]["type_name"] == "testapp.Refuses"
    assert context["failing_types"][0]["failed"] == 3
    (lag,) = context["queue_lag"]  # the retrying one is not due yet
    assert (lag["queue"], lag["due"]) == ("emails", 2) and lag["lag"].startswith("7m")
    assert context["oldest_due_age"].startswith("7m")
    # worker-a@host never registered: its lease is listed apart, and it is not counted alive.
    assert (context["workers"]["alive"], context["workers"]["other_holders"]) == ([], [("worker-a@host", 1)])
    assert context["unknown_types"] == {}


def test_only_live_workers_are_counted_and_each_shows_what_it_holds():
    alive = workers.register(worker_id="alive@host", hostname="host", pid=1, version="1", queues=None,
                             concurrency=4, lease_seconds=30)
    gone = workers.register(worker_id="gone@host", hostname="host", pid=2, version="1", queues=None,
                            concurrency=4, lease_seconds=30)
    stopped = workers.register(worker_id="stopped@host", hostname="host", pid=3, version="1", queues=None,
                               concurrency=4, lease_seconds=30)
    Worker._writer.filter(id=gone).update(alive_until=timezone.now() - timedelta(seconds=1))
    workers.stop(stopped, StopReason.SIGTERM)
    ThreeSteps.submit()
    ThreeSteps.submit()
    claim("alive@host", type_names=[ThreeSteps.type_name], limit=1, lease_seconds=30)
    claim("gone@host", type_names=[ThreeSteps.type_name], limit=1, lease_seconds=30)

    panel = dashboard_context(timezone.now())["workers"]
    assert [(w.worker_id, w.running) for w in panel["alive"]] == [("alive@host", 1)]
    assert (panel["gone"], panel["other_holders"]) == (1, [("gone@host", 1)])
    assert {w.worker_id: w.state for w in Worker.objects.with_state()} == {
        "alive@host": "alive", "gone@host": "gone", "stopped@host": "stopped"}
    assert alive != gone


def test_dashboard_page_and_its_links(operator_client):
    seed()
    with CaptureQueriesContext(connection) as captured:
        response = operator_client.get(dashboard_url())
    html = response.content.decode()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert response.status_code == 200
    assert "The last 24 hours, by status" in text
    # Finished statuses link to what finished in the window, the others to what was created in it.
    assert re.search(r"status__exact=failed&amp;finished_at__gte=\d{4}-", html)
    assert re.search(r"status__exact=ready&amp;created_at__gte=\d{4}-", html)
    assert "The oldest due procedure has waited 7m" in text
    assert "testapp.Refuses" in text and "worker-a@host" in text
    assert len(captured) < 21  # each panel (and chart) a query or two, whatever the number of rows
    index = operator_client.get("/admin/django_procedures/").content.decode()
    assert dashboard_url() in index
    assert dashboard_url() in operator_client.get("/admin/django_procedures/procedurerun/").content.decode()


def test_viewers_without_the_view_permission_are_refused(db, django_user_model, client):
    user = django_user_model.objects.create_user("nobody", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(dashboard_url()).status_code == 403


def test_the_schedules_panel_lists_paused_failing_and_drifting_schedules(operator_client):
    from django_procedures import register_schedule
    from django_procedures.models import Schedule
    from django_procedures.store import schedules
    from testproject.testapp.procedures import Heartbeat

    for name in ("quiet", "paused", "failing", "late"):
        register_schedule(name, Heartbeat, period=timedelta(minutes=5))
    schedules.pause("paused", reason="the API is down")
    Schedule._writer.filter(name="failing").update(failures=3, runs=5, last_drift_ms=20)
    Schedule._writer.filter(name="late").update(last_drift_ms=90_000)

    panel = dashboard_context(timezone.now())["schedules"]
    assert (panel["total"], panel["paused"], panel["failing"]) == (4, 1, 1)
    assert [s.name for s in panel["paused_list"]] == ["paused"]
    assert [(s.name, s.failures) for s in panel["failing_list"]] == [("failing", 3)]
    assert [(s.name, s.last_drift_ms) for s in panel["drift_list"]] == [("late", 90_000), ("failing", 20)]

    html = operator_client.get(dashboard_url()).content.decode()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert "4 schedules: 1 paused, 1 with failures." in text
    assert re.search(r'id="dash-paused">.*?paused</a>.*?the API is down', html, re.S)
    assert re.search(r'id="dash-drift">.*?late</a></td><td>90,000 \(1m 30s\)</td>', html, re.S)


def test_status_chips_name_statuses_as_the_filters_do(operator_client):
    html = operator_client.get(dashboard_url()).content.decode()
    chips = re.findall(r'<span class="proc-badge proc-[a-z_]+">([^<]+)</span>', html)
    assert "rolling back" in chips and "rolled back" in chips
    assert not [c for c in chips if "_" in c]


def test_a_schedule_nobody_ticks_shows_its_growing_lag_not_the_drift_of_its_last_tick(operator_client):
    from django_procedures import register_schedule
    from django_procedures.models import Schedule
    from testproject.testapp.procedures import Heartbeat

    now = timezone.now()
    for name in ("ticked", "forgotten"):
        register_schedule(name, Heartbeat, period=timedelta(minutes=1))
    Schedule._writer.filter(name="ticked").update(last_drift_ms=2_000, next_tick_at=now + timedelta(seconds=30))
    # Its last tick was on time; it has not been ticked since, an hour ago.
    Schedule._writer.filter(name="forgotten").update(last_drift_ms=5, next_tick_at=now - timedelta(hours=1))

    panel = dashboard_context(now)["schedules"]
    assert [(s.name, s.drift) for s in panel["drift_list"]] == [("forgotten", "3,600,000 (1h)"),
                                                                 ("ticked", "2,000 (2s)")]
    later = dashboard_context(now + timedelta(hours=1))["schedules"]
    assert later["drift_list"][0].drift == "7,200,000 (2h)"  # it grows while nothing ticks it
    html = operator_client.get(dashboard_url()).content.decode()
    assert re.search(r'id="dash-drift">.*?forgotten</a></td><td>3,600,\d{3} \(1h\) <span class="proc-badge '
                     r'proc-failed sched-overdue"', html, re.S)
