"""The schedules list and page: columns, filters, search, query count, the form and its validation in place."""

import re
from datetime import UTC, datetime, timedelta
from html import unescape

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_procedures import clock, register_schedule, tick
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.store import schedules
from django_procedures.testing import drain
from testproject.testapp.procedures import Heartbeat, Refuses
from tests.admin.helpers import (
    SCHEDULE_OPERATOR,
    VIEW,
    VIEW_SCHEDULE,
    changelist_url,
    client_for,
    page_url,
    schedule_add_url,
    schedule_url,
    schedules_url,
    staff,
)

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


@pytest.fixture
def client(db):
    return client_for(staff("scheduler", *SCHEDULE_OPERATOR))


def make(name="beat", procedure=Heartbeat, **options):
    options.setdefault("period", None if options.get("cron") else 5 * MIN)
    with clock.frozen_at(T0):
        return register_schedule(name, procedure, **options)[0]


def text(response) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", response.content.decode())))


def row(response, name) -> str:
    """The text of the changelist row of schedule ``name``."""
    html = response.content.decode()
    match = re.search(rf'<tr>(?:(?!</tr>).)*?>{re.escape(name)}</a>.*?</tr>', html, re.S)
    assert match, f"no row for {name}"
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", match.group(0)))).strip()


# -- the list ------------------------------------------------------------------------------------


def test_the_list_shows_mode_cadence_next_tick_runs_metrics_and_pause_state(client):
    make("every-5m")
    make("nightly", cron="0 3 * * *", timezone="Europe/Berlin", missed="catch_up", max_pending=2)
    overlapping = make("overlapping", mode="fixed_rate_overlap", max_concurrency=3, period=MIN)
    make("after-each", mode="fixed_delay", period=10 * MIN)
    Schedule._writer.filter(id=overlapping.id).update(runs=12, skips=3, overlaps=4, failures=2, active_runs=2,
                                                      last_drift_ms=1250, pending_ticks=[T0.isoformat()])
    schedules.pause("after-each", reason="the API is down")

    response = client.get(schedules_url())
    assert response.status_code == 200
    assert row(response, "every-5m").startswith("every-5m testapp.Heartbeat fixed rate missed: skip every 5m")
    assert "fixed rate missed: catch up cron 0 3 * * * Europe/Berlin" in row(response, "nightly")
    assert "fixed rate overlap missed: skip every 1m" in row(response, "overlapping")
    cells = re.findall(r'<td class="field-(\w+)[^"]*">(.*?)</td>', re.search(
        r'<tr>(?:(?!</tr>).)*?>overlapping</a>.*?</tr>', response.content.decode(), re.S).group(0), re.S)
    values = {name: re.sub(r"<[^>]+>", "", value).strip() for name, value in cells}
    assert (values["active_pending"], values["runs"], values["skips"], values["overlaps"],
            values["failures"], values["last_drift"], values["status"]) == ("2 · 1", "12", "3", "4", "2", "1,250",
                                                                            "enabled")
    assert values["next_tick"].startswith("in ")  # T0 is years ahead of the wall clock the list reads
    assert "paused the API is down" in row(response, "after-each")
    assert "fixed delay every 10m" in row(response, "after-each")  # no missed-tick policy: it has no missed ticks


def test_filters_by_mode_and_enabled_and_search_by_name_or_procedure(client):
    make("a-rate")
    make("b-overlap", mode="fixed_rate_overlap", max_concurrency=2)
    make("c-refuses", procedure=Refuses)
    schedules.pause("a-rate")

    def listed(query):
        return set(re.findall(r'class="field-name"><a href="[^"]+">([^<]+)</a>', client.get(
            schedules_url(query)).content.decode()))

    assert listed("mode__exact=fixed_rate_overlap") == {"b-overlap"}
    assert listed("enabled__exact=0") == {"a-rate"}
    assert listed("enabled__exact=1") == {"b-overlap", "c-refuses"}
    assert listed("q=overlap") == {"b-overlap"}
    assert listed("q=Refuses") == {"c-refuses"}


def test_the_query_count_of_the_list_does_not_grow_with_the_rows(client):
    def queries_for(n):
        Schedule._writer.all().delete()
        for i in range(n):
            make(f"s{i:03}", **({"cron": "*/5 * * * *"} if i % 2 else {}))
        schedules.pause("s000")
        client.get(schedules_url())  # warm caches (content types, permissions)
        with CaptureQueriesContext(connection) as captured:
            response = client.get(schedules_url())
        assert response.status_code == 200 and response.content.decode().count('class="field-name"') == n
        return len(captured)

    assert queries_for(3) == queries_for(40)


# -- the form: validation in place ---------------------------------------------------------------

VALID = {"name": "new", "procedure": Heartbeat.type_name, "state": "{}", "mode": "fixed_rate", "period": "00:05:00",
         "cron": "", "timezone": "", "initial_delay": "0", "max_concurrency": "1", "missed": "skip",
         "max_pending": "0", "max_run_time": "", "queue": "", "enabled": "on"}


def field_errors(response, field) -> list[str]:
    """The error messages shown next to ``field`` on the form (the list Django renders inside its row)."""
    html = response.content.decode()
    block = re.search(rf'<ul class="errorlist" id="id_{field}_error">(.*?)</ul>', html, re.S)
    return [unescape(m) for m in re.findall(r"<li>(.*?)</li>", block.group(1), re.S)] if block else []


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"max_concurrency": "3"}, "max_concurrency",
     "fixed_rate schedules run one at a time; set max_concurrency to 1 or use mode fixed_rate_overlap; got 3"),
    ({"mode": "fixed_rate_overlap"}, "max_concurrency", "set max_concurrency to 2 or more, or use mode fixed_rate"),
    ({"missed": "catch_up"}, "max_pending", "catch_up keeps missed ticks to run later; set max_pending to 1 or more"),
    ({"period": "", "cron": "61 * * * *"}, "cron", "minute must be between 0 and 59"),
    ({"period": "", "cron": "0 3 * * *", "mode": "fixed_delay"}, "cron", "fixed_delay runs a period after"),
    ({"period": "00:05:00", "cron": "0 3 * * *"}, "cron", "give either a period or a cron expression, not both"),
    ({"period": ""}, "period", "give a period (for example timedelta(minutes=5)) or, for rate modes, a cron"),
    ({"period": "0"}, "period", "period must be positive; got 0 seconds"),
    ({"period": "3000000 00:00:00"}, "period", "period must be at most 100 years (36525 days)"),
    ({"max_run_time": "40000 00:00:00"}, "max_run_time", "max_run_time must be at most 100 years"),
    ({"procedure": "nope.Nope"}, "procedure", "no procedure class is registered as 'nope.Nope'"),
    ({"timezone": "Mars/Olympus"}, "timezone", "unknown time zone 'Mars/Olympus'"),
    ({"state": "[1, 2]"}, "state", "state must be a JSON object"),
])
def test_a_contradictory_schedule_shows_what_to_change_next_to_its_field(client, changes, field, message):
    response = client.post(schedule_add_url(), {**VALID, **changes})
    assert response.status_code == 200, "the form is shown again"
    errors = field_errors(response, field)
    assert any(message in e for e in errors), errors
    assert "is violated" not in response.content.decode()  # the database's constraints never speak instead
    assert not Schedule.objects.exists()


def test_the_procedure_field_offers_the_registered_types(client):
    html = client.get(schedule_add_url()).content.decode()
    select = re.search(r'<select name="procedure"[^>]*>(.*?)</select>', html, re.S).group(1)
    assert f'<option value="{Heartbeat.type_name}">' in select and f'value="{Refuses.type_name}"' in select
    stale = make("stale")
    Schedule._writer.filter(id=stale.id).update(procedure="gone.Type")
    html = client.get(schedule_url(stale.id)).content.decode()
    assert '<option value="gone.Type" selected>gone.Type (not registered in this process)</option>' in html


def test_adding_a_schedule_sets_its_first_tick_like_register_schedule(client):
    with clock.frozen_at(T0):
        response = client.post(schedule_add_url(), {**VALID, "name": "nightly", "period": "", "cron": "0 3 * * *",
                                                     "timezone": "Europe/Berlin"})
        assert response.status_code == 302, field_errors(response, "cron")
        client.post(schedule_add_url(), {**VALID, "name": "soon", "initial_delay": "00:10:00"})
        client.post(schedule_add_url(), {k: v for k, v in {**VALID, "name": "held"}.items() if k != "enabled"})
    nightly, soon, held = (Schedule.objects.get(name=n) for n in ("nightly", "soon", "held"))
    assert nightly.next_tick_at == datetime(2030, 1, 2, 2, 0, tzinfo=UTC)  # 03:00 CET
    assert soon.next_tick_at == T0 + 10 * MIN
    assert (held.enabled, held.disabled_reason) == (False, "created paused")
    assert LogEntry.objects.filter(object_id=str(nightly.id), action_flag=ADDITION).exists()


def test_editing_writes_the_definition_and_never_the_metrics(client):
    s = make()
    page = client.get(schedule_url(s.id)).content.decode()
    for metric in ("active_runs", "pending_runs", "runs", "skips", "overlaps", "failures", "last_drift_ms"):
        assert f'data-metric="{metric}"' in page and f'name="{metric}"' not in page
    assert "field-next_tick_detail" in page and 'name="next_tick_at"' not in page
    assert 'name="enabled"' not in page  # pausing is an action with its own permission

    tick(T0)  # while the form is open, a run starts and the metrics move
    Schedule._writer.filter(id=s.id).update(skips=7)
    response = client.post(schedule_url(s.id), {**VALID, "name": "beat", "queue": "emails", "runs": "999",
                                                "skips": "0", "enabled": ""})
    assert response.status_code == 302
    s.refresh_from_db()
    assert (s.queue, s.skips, s.runs, s.active_runs, s.enabled) == ("emails", 7, 0, 1, True)
    assert s.next_tick_at == T0 + 5 * MIN  # the cadence did not change: the next tick stays


def test_a_schedule_defined_in_code_keeps_its_name(client):
    with clock.frozen_at(T0):
        s, _ = schedules.register_definition("from-code", Heartbeat, period=MIN, from_code=True)
    page = client.get(schedule_url(s.id)).content.decode()
    assert 'name="name"' not in page and "field-name" in page


# -- the schedule page: snapshot and recent runs ------------------------------------------------


def test_the_page_shows_the_snapshot_and_links_to_the_recent_runs(client):
    s = make(period=MIN)
    tick(T0)
    drain(now=T0)
    tick(T0 + MIN)
    other = Heartbeat.submit()
    response = client.get(schedule_url(s.id))
    html = response.content.decode()
    snapshot = unescape(re.search(r'<pre class="proc-block" id="sched-snapshot">(.*?)</pre>', html, re.S).group(1))
    assert '"runs": 1' in snapshot and '"active_runs": 1' in snapshot and '"name": "beat"' in snapshot
    runs_link = f"{changelist_url()}?schedule__id__exact={s.id}"
    assert f'href="{runs_link}"' in html and 'id="sched-runs-tool"' in html
    table = re.search(r'<table id="sched-runs">(.*?)</table>', html, re.S).group(1)
    assert table.count("<tr>") == 3 and "2030-01-01 12:01:00 UTC" in table  # header and two runs, newest first

    listed = client.get(runs_link).content.decode()
    ids = set(re.findall(r'/procedurerun/([0-9a-f-]{36})/change/', listed))
    assert ids == {str(i) for i in ProcedureRun.objects.filter(schedule=s).values_list("id", flat=True)}
    assert str(other.id) not in ids
    unscheduled = client.get(changelist_url("schedule__isnull=True")).content.decode()
    assert str(other.id) in unscheduled and "not started by a schedule" in unscheduled


def test_a_run_links_back_to_its_schedule(client):
    s = make()
    tick(T0)
    run = ProcedureRun.objects.get(schedule=s)
    html = client.get(page_url(run.id)).content.decode()
    assert 'id="proc-schedule">beat</a>' in html and "for its tick at 2030-01-01 12:00:00 UTC" in html


def test_a_viewer_reads_every_schedule_field_but_edits_none(db):
    s = make()
    viewer = client_for(staff("viewer", VIEW, VIEW_SCHEDULE))
    page = viewer.get(schedule_url(s.id))
    assert page.status_code == 200 and 'name="period"' not in page.content.decode()
    assert "every 5m" in text(viewer.get(schedules_url()))
    assert viewer.post(schedule_url(s.id), {**VALID, "name": "beat", "queue": "x"}).status_code == 403
    assert viewer.get(schedule_add_url()).status_code == 403
    assert Schedule.objects.get(id=s.id).queue == ""


def test_empty_state_and_initial_delay_mean_none(client):
    response = client.post(schedule_add_url(), {**VALID, "state": "", "initial_delay": ""})
    assert response.status_code == 302, [field_errors(response, f) for f in ("state", "initial_delay")]
    s = Schedule.objects.get(name="new")
    assert (s.state, s.initial_delay) == ({}, timedelta(0))


def test_a_schedule_that_cannot_tick_shows_why_in_the_list_and_on_its_page(client):
    s = make("gone")
    Schedule._writer.filter(id=s.id).update(procedure="gone.Removed")  # stored past validation
    tick(T0)
    listing = client.get(schedules_url()).content.decode()
    assert re.search(r'class="proc-badge proc-failed sched-error"[^>]*>cannot tick</span>'
                     r'<span class="proc-error proc-reason">no procedure class is registered as', unescape(listing))
    page = unescape(client.get(schedule_url(s.id)).content.decode())
    assert re.search(r"Last error:.*?no procedure class is registered as 'gone.Removed'", page, re.S)


def test_every_time_on_the_page_reads_in_one_format(client):
    s = make("formats", period=MIN)
    tick(T0)
    drain(now=T0)
    Schedule._writer.filter(id=s.id).update(last_error="boom", last_error_at=T0 + MIN, updated_at=T0 + 2 * MIN)
    page = text(client.get(schedule_url(s.id)))
    status = page[page.index("Next tick:"):page.index("Metrics")]
    assert re.findall(r"(Next tick|Last tick at|Last error at|Updated at): (\S+ \S+ \S+)", status) == [
        ("Next tick", "2030-01-01 12:01:00 UTC"), ("Last tick at", "2030-01-01 12:00:00 UTC"),
        ("Last error at", "2030-01-01 12:01:00 UTC"), ("Updated at", "2030-01-01 12:02:00 UTC")]
    assert not re.search(r"\b[ap]\.m\.|noon|midnight", page)


def test_a_schedule_more_than_two_ticks_behind_is_flagged_overdue_in_the_list_and_on_its_page(client):
    from django.utils import timezone

    now = timezone.now()
    late, behind, paused = make("late"), make("behind"), make("paused")
    nightly = make("nightly", cron="0 3 * * *")
    Schedule._writer.filter(id__in=[late.id, paused.id]).update(next_tick_at=now - 11 * MIN)  # 5m period
    Schedule._writer.filter(id=behind.id).update(next_tick_at=now - 9 * MIN)  # late, not two ticks behind
    Schedule._writer.filter(id=nightly.id).update(next_tick_at=now - timedelta(days=2, hours=1))
    schedules.pause("paused")

    listing = client.get(schedules_url())
    flagged = re.findall(r'<tr>(?:(?!</tr>).)*?>([\w-]+)</a>(?:(?!</tr>).)*?sched-overdue', listing.content.decode(),
                         re.S)
    assert sorted(flagged) == ["late", "nightly"]
    # "11m ago", or "11m 1s ago" on a machine slow enough that a second passed since the update above.
    assert "overdue" in row(listing, "late") and re.search(r"\b11m( \d+s)? ago", row(listing, "late"))
    page = client.get(schedule_url(late.id)).content.decode()
    assert re.search(r'sched-overdue" title="Not ticked for 11m[^"]*more than two ticks[^"]*--with-scheduler',
                     unescape(page))
    assert "sched-overdue" not in client.get(schedule_url(behind.id)).content.decode()
