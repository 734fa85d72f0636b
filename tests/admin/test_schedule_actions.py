"""Pause, resume and trigger-now: confirmation, outcome messages, admin log, permissions, forged POSTs."""

import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, LogEntry

from django_procedures import register_schedule, tick
from django_procedures.admin import ScheduleAdmin, schedule_actions
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.store import schedules
from testproject.testapp.procedures import Heartbeat
from tests.admin.helpers import (
    PAUSE,
    RESUME,
    SCHEDULE_OPERATOR,
    TRIGGER,
    VIEW,
    VIEW_SCHEDULE,
    client_for,
    schedule_button_url,
    schedule_url,
    schedules_url,
    staff,
)
from tests.admin.test_actions import messages_of

pytestmark = pytest.mark.django_db
MIN = timedelta(minutes=1)


@pytest.fixture
def scheduler(db):
    return staff("scheduler", *SCHEDULE_OPERATOR)


@pytest.fixture
def client(scheduler):
    return client_for(scheduler)


def make(name, **options):
    options.setdefault("period", 5 * MIN)
    options.setdefault("initial_delay", timedelta(hours=1))  # nothing ticks unless triggered
    return register_schedule(name, Heartbeat, **options)[0]


def act(client, action, schedules_, confirm=False, **extra):
    """POST the schedules list's action form; with ``confirm``, as the confirmation page does (and follow it)."""
    data = {"action": action, "_selected_action": [str(s.pk) for s in schedules_], "index": 0, **extra}
    if confirm:
        data["post"] = "yes"
    return client.post(schedules_url(), data, follow=confirm)


def fresh(s) -> Schedule:
    return Schedule.objects.get(pk=s.pk)


def runs_of(s) -> int:
    return ProcedureRun.objects.filter(schedule=s).count()


def plan_line(html, s) -> str:
    match = re.search(rf'<li data-id="{s.pk}" class="(proc-will-change|proc-unchanged)">(.*?)</li>', html, re.S)
    assert match, f"{s.name} is not on the confirmation page"
    return match.group(1) + ": " + re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", match.group(2))).strip()


# -- pause and resume ----------------------------------------------------------------------------


def test_pause_confirms_then_pauses_through_the_store_with_the_reason_and_logs_it(client, scheduler):
    a, b = make("a"), make("b")
    schedules.pause(b, reason="maintenance")
    page = act(client, "pause_selected", [a, b])
    html = page.content.decode()
    assert page.status_code == 200 and "Pause 1 schedule?" in html
    assert plan_line(html, a).startswith("proc-will-change: a (testapp.Heartbeat) enabled — enabled → paused")
    assert plan_line(html, b) == ("proc-unchanged: b (testapp.Heartbeat) paused — left alone: already paused "
                                  "(maintenance)")
    assert 'name="reason"' in html and 'value="paused by scheduler"' in html
    assert 'name="csrfmiddlewaretoken"' in html and 'name="post" value="yes"' in html
    assert fresh(a).enabled  # nothing changes before the confirmation

    done = act(client, "pause_selected", [a, b], confirm=True, reason="  the upstream API is down ")
    assert done.redirect_chain == [(schedules_url(), 302)]
    assert (fresh(a).enabled, fresh(a).disabled_reason) == (False, "the upstream API is down")
    assert fresh(b).disabled_reason == "maintenance"
    assert messages_of(done) == ["Paused 1 schedule.", "1 schedule was left alone: schedule 'b' is already paused"]
    (entry,) = LogEntry.objects.all()
    assert (entry.user_id, entry.object_id, entry.action_flag) == (scheduler.pk, str(a.pk), CHANGE)
    assert entry.get_change_message() == "Paused from the admin: the upstream API is down"


def test_resume_makes_the_next_tick_due_now_and_counts_in_the_plural(client):
    a, b = make("a"), make("b")
    for s in (a, b):
        schedules.pause(s)
    html = act(client, "resume_selected", [a, b]).content.decode()
    assert "Resume 2 schedules?" in html and "its next tick is due now" in plan_line(html, a)
    done = act(client, "resume_selected", [a, b], confirm=True)
    assert messages_of(done) == ["Resumed 2 schedules."]
    assert fresh(a).enabled and fresh(b).enabled and fresh(a).disabled_reason == ""
    assert tick().started == 2  # due at once, not an hour from now
    assert LogEntry.objects.filter(change_message="Resumed from the admin.").count() == 2


# -- trigger now -------------------------------------------------------------------------------


def test_trigger_shows_what_the_tick_would_do_then_starts_a_run(client):
    free = make("free")
    busy = make("busy", missed="coalesce_latest")
    schedules.trigger(busy)  # its one slot is taken
    paused = make("paused")
    schedules.pause(paused)
    html = act(client, "trigger_selected", [free, busy, paused]).content.decode()
    assert "Trigger 2 schedules now?" in html
    assert plan_line(html, free).endswith("a tick now: starts a run")
    assert plan_line(html, busy).endswith("a tick now, but no slot is free (1 of 1 slot taken): it waits as a "
                                          "pending tick (coalesce_latest)")
    assert plan_line(html, paused).endswith("left alone: it is paused; resume it first")
    assert runs_of(free) == 0

    done = act(client, "trigger_selected", [free, busy, paused], confirm=True)
    assert messages_of(done) == [
        "Triggered 2 schedules: 1 run started, 0 ticks skipped, 1 tick pending.",
        "1 schedule was not triggered: schedule 'paused' is paused; resume it first"]
    assert (runs_of(free), runs_of(busy), runs_of(paused)) == (1, 1, 0)
    assert len(fresh(busy).pending_ticks) == 1
    assert LogEntry.objects.get(object_id=str(free.pk)).get_change_message() == (
        "Triggered from the admin: 1 run started, 0 ticks skipped, 0 ticks pending.")


def test_a_trigger_without_a_free_slot_under_skip_is_a_skip(client):
    s = make("s")
    schedules.trigger(s)
    html = act(client, "trigger_selected", [s]).content.decode()
    assert plan_line(html, s).endswith("it is dropped and counted as a skip (skip)")
    done = act(client, "trigger_selected", [s], confirm=True)
    assert messages_of(done) == ["Triggered 1 schedule: 0 runs started, 1 tick skipped, 0 ticks pending."]
    assert (fresh(s).skips, runs_of(s)) == (1, 1)


def test_buttons_on_the_schedule_page(client):
    s = make("s")
    page = client.get(schedule_url(s.pk)).content.decode()
    assert 'id="sched-pause"' in page and 'id="sched-trigger"' in page and 'id="sched-resume"' not in page
    assert f'action="{schedule_button_url(s.pk, "trigger")}"' in page

    confirmation = client.post(schedule_button_url(s.pk, "trigger"))
    assert confirmation.status_code == 200 and "Trigger 1 schedule now?" in confirmation.content.decode()
    assert runs_of(s) == 0
    done = client.post(schedule_button_url(s.pk, "trigger"), {"post": "yes"}, follow=True)
    assert done.redirect_chain == [(schedule_url(s.pk), 302)] and runs_of(s) == 1

    client.post(schedule_button_url(s.pk, "pause"), {"post": "yes", "reason": "deploy"})
    page = client.get(schedule_url(s.pk)).content.decode()
    assert 'id="sched-resume"' in page and 'id="sched-pause"' not in page and 'id="sched-trigger"' not in page
    assert re.search(r'id="sched-paused">.*?deploy', page, re.S)
    client.post(schedule_button_url(s.pk, "resume"), {"post": "yes"})
    assert fresh(s).enabled
    assert LogEntry.objects.filter(object_id=str(s.pk)).count() == 3


def test_selecting_too_many_is_refused(client, monkeypatch):
    monkeypatch.setattr(ScheduleAdmin, "action_limit", 1)
    a, b = make("a"), make("b")
    done = act(client, "pause_selected", [a, b], confirm=True)
    assert messages_of(done) == ["Select at most 1 schedules at a time; filter the list further."]
    assert fresh(a).enabled and fresh(b).enabled


# -- permissions ---------------------------------------------------------------------------------


def test_a_viewer_sees_neither_actions_nor_buttons(db):
    s = make("s")
    viewer = client_for(staff("viewer", VIEW, VIEW_SCHEDULE))
    listing = viewer.get(schedules_url()).content.decode()
    for action in ("pause_selected", "resume_selected", "trigger_selected"):
        assert action not in listing
    page = viewer.get(schedule_url(s.pk)).content.decode()
    assert "sched-pause" not in page and "sched-trigger" not in page


@pytest.mark.parametrize("action", ["pause_selected", "resume_selected", "trigger_selected"])
def test_a_forged_action_post_changes_nothing(db, action):
    running, paused = make("running"), make("paused")
    schedules.pause(paused, reason="held")
    viewer = client_for(staff("viewer", VIEW, VIEW_SCHEDULE))
    response = act(viewer, action, [running, paused], confirm=True)
    assert response.status_code in (200, 302)
    assert (fresh(running).enabled, fresh(paused).enabled, fresh(paused).disabled_reason) == (True, False, "held")
    assert ProcedureRun.objects.count() == 0 and not LogEntry.objects.exists()


@pytest.mark.parametrize("kind", ["pause", "resume", "trigger"])
def test_a_forged_button_post_is_forbidden(db, kind):
    running, paused = make("running"), make("paused")
    schedules.pause(paused)
    viewer = client_for(staff("viewer", VIEW, VIEW_SCHEDULE))
    for s in (running, paused):
        assert viewer.post(schedule_button_url(s.pk, kind), {"post": "yes"}).status_code == 403
    assert (fresh(running).enabled, fresh(paused).enabled) == (True, False)
    assert ProcedureRun.objects.count() == 0 and not LogEntry.objects.exists()


def test_each_action_has_its_own_permission(db):
    s = make("s")
    perms = {"pause": PAUSE, "resume": RESUME, "trigger": TRIGGER}
    for kind, perm in perms.items():
        user = client_for(staff(f"only-{kind}", VIEW_SCHEDULE, perm))
        options = set(re.findall(r'<option value="(\w+_selected)"', user.get(schedules_url()).content.decode()))
        assert options == {f"{kind}_selected"}
        for other in set(perms) - {kind}:
            assert user.post(schedule_button_url(s.pk, other), {"post": "yes"}).status_code == 403
    assert fresh(s).enabled and runs_of(s) == 0


def test_an_action_permission_without_the_view_permission_is_not_enough(db):
    s = make("s")
    blind = client_for(staff("blind", PAUSE, TRIGGER))
    assert blind.post(schedule_button_url(s.pk, "pause"), {"post": "yes"}).status_code == 403
    assert blind.post(schedule_button_url(s.pk, "trigger"), {"post": "yes"}).status_code == 403
    assert act(blind, "pause_selected", [s], confirm=True).status_code == 403
    assert fresh(s).enabled and runs_of(s) == 0


@pytest.mark.parametrize("kind", ["pause", "resume", "trigger"])
def test_each_action_permission_alone_opens_nothing(db, kind):
    """Staff holding exactly one action permission, without the view permission: no page, no POST, no action."""
    running, paused = make("running"), make("paused")
    schedules.pause(paused, reason="held")
    blind = client_for(staff("blind", {"pause": PAUSE, "resume": RESUME, "trigger": TRIGGER}[kind]))
    for s in (running, paused):
        assert blind.get(schedule_button_url(s.pk, kind)).status_code == 403
        assert blind.post(schedule_button_url(s.pk, kind), {"post": "yes"}).status_code == 403
    assert act(blind, f"{kind}_selected", [running, paused]).status_code == 403
    assert act(blind, f"{kind}_selected", [running, paused], confirm=True).status_code == 403
    assert (fresh(running).enabled, fresh(paused).enabled, fresh(paused).disabled_reason) == (True, False, "held")
    assert runs_of(running) == 0 and not LogEntry.objects.exists()


def test_changing_a_schedule_does_not_pause_it(db):
    s = make("s")
    editor = client_for(staff("editor", VIEW_SCHEDULE, "change_schedule"))
    from tests.admin.test_schedule_admin import VALID

    response = editor.post(schedule_url(s.pk), {**VALID, "name": "s", "enabled": ""})
    assert response.status_code == 302 and fresh(s).enabled


def test_a_post_without_the_csrf_token_is_refused(scheduler):
    s = make("s")
    client = client_for(scheduler, enforce_csrf_checks=True)
    assert client.post(schedule_button_url(s.pk, "pause"), {"post": "yes"}).status_code == 403
    assert act(client, "pause_selected", [s], confirm=True).status_code == 403
    assert fresh(s).enabled


# -- the work functions, without a request -------------------------------------------------------


def test_the_work_functions_report_what_they_did_and_refused():
    a, b = make("a"), make("b")
    schedules.pause(b)
    assert schedule_actions.pause_schedules([a.pk, b.pk, 999_999], reason="r") == schedule_actions.ScheduleActionReport(
        ((a.pk, "Paused from the admin: r"),),
        ((b.pk, "schedule 'b' is already paused"), (999_999, "schedule 999999 does not exist")))
    report = schedule_actions.resume_schedules([a.pk, b.pk])
    assert [pk for pk, _ in report.changed] == [a.pk, b.pk] and report.refused == ()
    report = schedule_actions.trigger_schedules([a.pk, b.pk])
    assert report.totals == {"started": 2, "skipped": 0, "pending": 0}
