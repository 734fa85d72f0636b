"""Deleting schedules in the admin goes through the store, behind the delete and view permissions."""

import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.urls import reverse

from django_procedures import register_schedule
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.store import schedules
from django_procedures.testing import drain
from testproject.testapp.procedures import Heartbeat
from tests.admin.helpers import VIEW, VIEW_SCHEDULE, client_for, schedule_url, schedules_url, staff
from tests.admin.test_actions import messages_of
from tests.admin.test_schedule_actions import act, plan_line

pytestmark = pytest.mark.django_db
DELETE = "delete_schedule"


def make(name: str) -> Schedule:
    return register_schedule(name, Heartbeat, period=timedelta(minutes=5), initial_delay=timedelta(hours=1))[0]


def delete_url(pk) -> str:
    return reverse("admin:django_procedures_schedule_delete", args=[pk])


@pytest.fixture
def deleter(db):
    return staff("deleter", VIEW, VIEW_SCHEDULE, DELETE)


def with_runs(name: str) -> tuple[Schedule, ProcedureRun, ProcedureRun]:
    """A schedule with a finished run and an unfinished one."""
    s = make(name)
    schedules.trigger(s)
    drain()
    Schedule._writer.filter(pk=s.pk).update(max_concurrency=2, mode="fixed_rate_overlap")
    schedules.trigger(s)
    done, ready = (ProcedureRun.objects.get(schedule=s, status=st) for st in ("done", "ready"))
    return s, done, ready


def test_the_delete_action_confirms_then_deletes_through_the_store_and_logs_it(deleter):
    s, done, ready = with_runs("doomed")
    client = client_for(deleter)
    html = act(client, "delete_selected", [s]).content.decode()
    assert "Delete 1 schedule?" in html and "cancels its unfinished runs" in html
    assert plan_line(html, s).endswith("deleted: 1 unfinished run is cancelled (with its subtree); 1 finished run "
                                       "is kept, no longer linked to it")
    assert Schedule.objects.filter(pk=s.pk).exists()  # nothing changes before the confirmation

    response = act(client, "delete_selected", [s], confirm=True)
    assert messages_of(response) == ["Deleted 1 schedule."]
    assert not Schedule.objects.filter(pk=s.pk).exists()
    ready.refresh_from_db()
    done.refresh_from_db()
    # A plain ORM delete would leave this run ready, holding a slot of a schedule that is gone.
    assert (ready.status, ready.error) == ("cancelled", "cancelled by deleting its schedule 'doomed' (deleter)")
    assert (done.status, done.schedule_id) == ("done", None)
    (entry,) = LogEntry.objects.all()
    assert (entry.object_id, entry.action_flag, entry.user_id) == (str(s.pk), DELETION, deleter.pk)


def test_the_page_delete_link_shows_the_same_confirmation_and_returns_to_the_list(deleter):
    s, _, ready = with_runs("doomed")
    client = client_for(deleter)
    page = client.get(schedule_url(s.pk)).content.decode()
    assert delete_url(s.pk) in page
    confirmation = client.get(delete_url(s.pk))
    assert confirmation.status_code == 200 and "Delete 1 schedule?" in confirmation.content.decode()
    done = client.post(delete_url(s.pk), {"post": "yes"}, follow=True)
    assert done.redirect_chain == [(schedules_url(), 302)]
    assert not Schedule.objects.filter(pk=s.pk).exists()
    assert ProcedureRun.objects.get(id=ready.id).status == "cancelled"


def test_deleting_needs_the_delete_and_the_view_permission(db):
    s, _, ready = with_runs("kept")
    viewer = client_for(staff("viewer", VIEW, VIEW_SCHEDULE))
    blind = client_for(staff("blind", DELETE))
    listing = viewer.get(schedules_url()).content.decode()
    assert "delete_selected" not in listing and delete_url(s.pk) not in viewer.get(schedule_url(s.pk)).content.decode()
    for client in (viewer, blind):
        assert client.post(delete_url(s.pk), {"post": "yes"}).status_code == 403
        assert client.get(delete_url(s.pk)).status_code == 403
        act(client, "delete_selected", [s], confirm=True)
    assert act(blind, "delete_selected", [s], confirm=True).status_code == 403
    assert Schedule.objects.filter(pk=s.pk).exists() and ProcedureRun.objects.get(id=ready.id).status == "ready"
    assert not LogEntry.objects.exists()


def test_the_offered_delete_action_is_the_stores(deleter):
    make("a")
    options = re.findall(r'<option value="(\w+)">([^<]*)</option>', client_for(deleter).get(schedules_url())
                         .content.decode())
    assert ("delete_selected", "Delete selected schedules…") in options
