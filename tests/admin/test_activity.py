"""The dashboard's chart data (PostgreSQL's date_bin and percentile_cont, SQLite's fallback) and chart layout."""

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from django_procedures.admin.activity import DateBin, duration_percentiles, finished_per_bucket, percentile, queue_depth
from django_procedures.admin.chart_layout import Bucket, bucket_start, columns, fill_buckets, nice_ceiling, stack
from django_procedures.admin.dashboard import charts_panel
from django_procedures.models import ProcedureRun
from testproject.testapp.procedures import Leaf, Parent, ThreeSteps
from tests.admin.helpers import changelist_url, dashboard_url

NOW = datetime(2026, 12, 1, 10, 30, 20, tzinfo=UTC)
NS = {"s": "http://www.w3.org/2000/svg"}


def finished(kind, status, finished_at, took=1.0, queue="default"):
    """A procedure of ``kind`` that ended ``status`` at ``finished_at`` after ``took`` seconds."""
    handle = kind.submit({}, queue=queue)
    ProcedureRun._writer.filter(id=handle.id).update(status=status, started_at=finished_at - timedelta(seconds=took),
                                                     finished_at=finished_at)
    return handle


# -- pure: percentiles, buckets, scales ------------------------------------------------------------


@pytest.mark.parametrize(("values", "fraction", "expected"), [
    ([5.0], 0.5, 5.0), ([1.0, 2.0], 0.5, 1.5), ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5),
    ([float(n) for n in range(1, 101)], 0.95, 95.05), ([0.0, 10.0], 0.95, 9.5), ([1.0, 9.0], 0.0, 1.0)])
def test_percentile_interpolates_like_percentile_cont(values, fraction, expected):
    assert percentile(values, fraction) == pytest.approx(expected)


def test_a_percentile_of_nothing_is_an_error_that_says_so():
    with pytest.raises(ValueError, match="pass at least one"):
        percentile([], 0.5)


def test_a_bucket_of_no_seconds_is_refused():
    with pytest.raises(ValueError, match="positive whole number of seconds; got 0"):
        DateBin(0, "finished_at")


def test_buckets_are_filled_oldest_first_with_zeros_and_end_with_the_current_one():
    found = {datetime(2026, 12, 1, 10, 28, tzinfo=UTC): (3, 1)}
    buckets = fill_buckets(found, NOW, timedelta(minutes=5), 60)
    assert [b.start.minute for b in buckets] == [26, 27, 28, 29, 30]
    assert [(b.done, b.failed) for b in buckets] == [(0, 0), (0, 0), (3, 1), (0, 0), (0, 0)]
    assert bucket_start(NOW, 900) == datetime(2026, 12, 1, 10, 30, tzinfo=UTC)


@pytest.mark.parametrize(("value", "ceiling"), [(0, 1), (1, 1), (3, 5), (7, 10), (11, 20), (21, 25), (2600, 5000),
                                                     (0.078, 0.1), (0.3, 0.5)])
def test_scales_round_up_to_a_readable_maximum(value, ceiling):
    assert nice_ceiling(value) == ceiling


def test_columns_stack_failed_on_done_in_proportion_to_the_scale():
    buckets = [Bucket(NOW, 6, 2), Bucket(NOW, 0, 0), Bucket(NOW, 1, 0)]
    peak, placed = columns(buckets, x0=0, width=300, top=0, height=100, gap=0)
    assert peak == 10
    first = placed[0]
    assert (first.x, first.width, first.done_y, first.done_height) == (0, 100, 40, 60)
    assert (first.failed_y, first.failed_height) == (20, 20)
    assert placed[1].done_height == 0 and placed[2].x == 200


def test_stacked_parts_lie_end_to_end_and_zero_parts_are_left_out():
    assert stack([("due", 5), ("later", 0), ("running", 5)], 20, 100, 200) == [
        ("due", 5, 100, 50), ("running", 5, 150, 50)]


# -- the queries, on the database the suite runs on (PostgreSQL: date_bin, percentile_cont; SQLite: fallback) ----


@pytest.mark.django_db
def test_finished_procedures_are_counted_per_bucket_by_outcome():
    t = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    for seconds, status in [(5, "done"), (59, "done"), (61, "failed"), (70, "rolled_back"), (125, "done"),
                            (130, "cancelled"), (3600, "done")]:
        finished(ThreeSteps, status, t + timedelta(seconds=seconds))
    found = finished_per_bucket(t, t + timedelta(minutes=10), 60)
    assert found == {t: (2, 0), t + timedelta(minutes=1): (0, 2), t + timedelta(minutes=2): (1, 0)}
    assert finished_per_bucket(t, t + timedelta(minutes=10), 900) == {t: (3, 2)}


@pytest.mark.django_db
def test_duration_percentiles_per_type_busiest_first():
    t = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    for n in range(1, 21):
        finished(ThreeSteps, "done", t + timedelta(minutes=n), took=float(n))
    finished(Leaf, "done", t, took=0.25)
    finished(Leaf, "done", t, took=0.75)
    finished(Leaf, "failed", t, took=100)  # failures are not in the durations
    finished(Leaf, "done", t - timedelta(hours=1), took=100)  # before the window
    rows = duration_percentiles(t, t + timedelta(hours=1))
    assert [(r["type_name"], r["n"]) for r in rows] == [(ThreeSteps.type_name, 20), (Leaf.type_name, 2)]
    three = [float(n) for n in range(1, 21)]
    assert rows[0]["p50"] == pytest.approx(percentile(three, 0.5)) == pytest.approx(10.5)
    assert rows[0]["p95"] == pytest.approx(percentile(three, 0.95)) == pytest.approx(19.05)
    assert (rows[1]["p50"], rows[1]["p95"]) == (pytest.approx(0.5), pytest.approx(0.725))


@pytest.mark.django_db
def test_queue_depth_splits_due_later_running_and_waiting():
    ThreeSteps.submit({}, queue="emails")
    ThreeSteps.submit({}, queue="emails")
    now = timezone.now()
    ThreeSteps.submit({}, queue="emails", run_after=now + timedelta(hours=1))
    handle = Parent.submit({"fanout": 1}, queue="tenants")
    ProcedureRun._writer.filter(id=handle.id).update(status="waiting")
    running = ThreeSteps.submit({}, queue="tenants")
    ProcedureRun._writer.filter(id=running.id).update(status="running")
    finished(ThreeSteps, "done", now, queue="emails")
    assert queue_depth(now) == [
        {"queue": "emails", "due": 2, "later": 1, "running": 0, "waiting": 0, "total": 3},
        {"queue": "tenants", "due": 0, "later": 0, "running": 1, "waiting": 1, "total": 2}]


@pytest.mark.django_db
def test_the_charts_panel_draws_what_the_queries_found():
    now = timezone.now()
    finished(ThreeSteps, "done", now - timedelta(minutes=3))
    finished(ThreeSteps, "failed", now - timedelta(minutes=3))
    finished(ThreeSteps, "done", now - timedelta(hours=5))
    panel = charts_panel(now)
    assert (panel["hour"]["done"], panel["hour"]["failed"]) == (1, 1)
    assert (panel["day"]["done"], panel["day"]["failed"]) == (2, 1)
    hour = ET.fromstring(str(panel["hour"]["svg"]))
    assert len(hour.findall(".//s:rect[@class='ch-bar ch-done']", NS)) == 1
    (failed_link,) = [a for a in hour.iterfind("s:a", NS) if a.find("s:rect[@class='ch-bar ch-failed']", NS)
                      is not None]
    assert failed_link.get("href").startswith(changelist_url("status__exact=failed&finished_at__gte=20"))
    assert "1 failed or rolled back" in failed_link.find("s:rect/s:title", NS).text


@pytest.mark.django_db
def test_a_chart_link_lists_what_finished_in_that_bucket(operator_client):
    now = timezone.now()
    inside = finished(ThreeSteps, "failed", now - timedelta(minutes=3))
    outside = finished(ThreeSteps, "failed", now - timedelta(minutes=30))
    hour = ET.fromstring(str(operator_client.get(dashboard_url()).context["charts"]["hour"]["svg"]))
    links = [a.get("href") for a in hour.iterfind("s:a", NS)
             if a.find("s:rect", NS).get("data-bucket") == bucket_start(now - timedelta(minutes=3), 60).isoformat()]
    html = operator_client.get(links[0]).content.decode()
    assert str(inside.id)[-8:] in html and str(outside.id)[-8:] not in html


@pytest.mark.django_db
def test_each_part_of_the_depth_chart_links_to_its_queue():
    ThreeSteps.submit({}, queue="emails")
    running = ThreeSteps.submit({}, queue="emails")
    ProcedureRun._writer.filter(id=running.id).update(status="running")
    chart = ET.fromstring(str(charts_panel(timezone.now())["depth"]["svg"]))
    links = {a.find("s:rect", NS).get("class"): a.get("href") for a in chart.iterfind("s:a", NS)}
    assert links == {"ch-bar ch-due": changelist_url("queue=emails"),
                     "ch-bar ch-running": changelist_url("queue=emails&status__exact=running")}
    assert [t.text for t in chart.iterfind("s:a/s:rect/s:title", NS)] == ["queue emails: 1 due now",
                                                                           "queue emails: 1 running"]


@pytest.mark.django_db
def test_percentiles_are_computed_from_the_latest_done_in_the_window():
    t = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    for n in range(1, 7):  # the later, the slower
        finished(ThreeSteps, "done", t + timedelta(minutes=n), took=float(n))
    (row,) = duration_percentiles(t, t + timedelta(hours=1), sample=3)
    assert row["n"] == 3 and row["p50"] == pytest.approx(5.0)
