"""The admin and events: what a waiting procedure waits for, "Send event" behind its permission, the history."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_procedures import send_event
from django_procedures.admin.why import NodeFacts, explain, waiting_for_events
from django_procedures.models import Event, ProcedureRun
from django_procedures.testing import drain
from testproject.testapp.procedures import Approval
from tests.admin.helpers import VIEW, changelist_url, client_for, page_url, staff

pytestmark = pytest.mark.django_db
SEND = "send_event_procedurerun"


def url(pid) -> str:
    return reverse("admin:django_procedures_procedurerun_send_event", args=[pid])


@pytest.fixture
def sender_client():
    return client_for(staff("approver", VIEW, SEND))


def waiting(timeout=2 * 86400.0):
    handle = Approval.submit({"timeout": timeout})
    drain()
    return handle.refresh()


def test_the_permission_is_declared_on_the_model_and_in_the_migration():
    assert Permission.objects.filter(codename=SEND, content_type__app_label="django_procedures").exists()
    assert (SEND, "Can send events to procedures") in ProcedureRun._meta.permissions


def test_the_list_and_page_say_what_it_waits_for_and_when_it_times_out(viewer_client):
    handle = waiting()
    wake = handle.wake_at
    expected = f"waiting for approved or rejected — times out {wake:%Y-%m-%d %H:%M:%S} UTC"
    assert expected in viewer_client.get(changelist_url()).content.decode()
    assert expected in viewer_client.get(page_url(handle.id)).content.decode()


def test_the_explanation_of_a_wait_without_timeout():
    now = timezone.now()
    assert waiting_for_events(("approved",), None, now) == "waiting for approved — no timeout"
    (reason,) = explain(NodeFacts(status="waiting", waiting_for="event", waiting_events=("a", "b", "c"),
                                  wake_at=now + timedelta(hours=2)), now)
    assert reason.code == "event" and reason.text.startswith("waiting for a, b or c — times out ")
    assert "(in 2h" in reason.text


def test_the_button_shows_only_with_the_permission(viewer_client, sender_client):
    handle = waiting()
    assert 'id="proc-send-event"' not in viewer_client.get(page_url(handle.id)).content.decode()
    assert 'id="proc-send-event"' in sender_client.get(page_url(handle.id)).content.decode()


def test_the_form_offers_the_names_waited_for_then_a_confirmation_then_sends_as_the_user(sender_client):
    handle = waiting()
    form = sender_client.get(url(handle.id)).content.decode()
    assert '<option value="approved"' in form and '<option value="rejected"' in form

    review = sender_client.post(url(handle.id), {"name": "approved", "payload": '{"amount": 20}', "review": "yes"})
    html = review.content.decode()
    assert review.status_code == 200 and 'id="proc-send-event-confirm"' in html and "this event wakes it" in html
    assert not Event.objects.exists()  # the review sends nothing

    sent = sender_client.post(url(handle.id), {"other_name": "approved", "payload": '{"amount": 20}',
                                               "confirm": "yes"})
    assert sent.status_code == 302 and sent["Location"] == page_url(handle.id)
    event = Event.objects.get()
    assert (event.name, event.payload, event.sent_by, event.consumed_by) == ("approved", {"amount": 20},
                                                                             "approver", "decide")
    assert handle.refresh().status == "ready"
    drain()
    page = sender_client.get(page_url(handle.id)).content.decode()
    assert 'id="proc-events"' in page and "by step decide" in page and "approver" in page


def test_another_name_is_kept_and_said_so(sender_client):
    handle = waiting()
    review = sender_client.post(url(handle.id), {"name": "approved", "other_name": "note", "payload": "",
                                                 "review": "yes"})
    assert "the event is kept" in review.content.decode()
    sender_client.post(url(handle.id), {"other_name": "note", "payload": "null", "confirm": "yes"})
    assert Event.objects.get().consumed_at is None and handle.refresh().status == "waiting"
    assert "not yet: kept for a wait" in sender_client.get(page_url(handle.id)).content.decode()


@pytest.mark.parametrize(("data", "problem"), [
    ({"other_name": "approved", "payload": "{not json"}, "The payload is not JSON"),
    ({"other_name": "", "name": "", "payload": "1"}, "must not be empty"),
    ({"other_name": "x" * 101, "payload": "1"}, "at most 100 characters"),
    ({"other_name": "approved", "payload": '{"a": "\\u0000"}'}, "NUL character"),  # was a 500 on PostgreSQL
])
def test_bad_input_is_shown_on_the_form_and_nothing_is_sent(sender_client, data, problem):
    handle = waiting()
    for stage in ("review", "confirm"):
        response = sender_client.post(url(handle.id), {**data, stage: "yes"})
        assert response.status_code == 200 and problem in response.content.decode()
    assert not Event.objects.exists()


def test_a_forged_post_without_the_permission_is_refused(viewer_client, operator_client):
    handle = waiting()
    for client in (viewer_client, operator_client):  # view, and view + retry + cancel: not enough
        response = client.post(url(handle.id), {"other_name": "approved", "payload": "null", "confirm": "yes"})
        assert response.status_code == 403
    assert not Event.objects.exists() and handle.refresh().status == "waiting"


def test_a_post_without_the_csrf_token_is_refused():
    handle = waiting()
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff("approver2", VIEW, SEND))
    response = client.post(url(handle.id), {"other_name": "approved", "payload": "null", "confirm": "yes"})
    assert response.status_code == 403 and not Event.objects.exists()


def test_a_finished_procedure_refuses_with_a_message_and_no_button(sender_client):
    handle = waiting()
    send_event(handle, "approved")
    drain()
    assert 'id="proc-send-event"' not in sender_client.get(page_url(handle.id)).content.decode()
    response = sender_client.post(url(handle.id), {"other_name": "late", "payload": "null", "confirm": "yes"},
                                  follow=True)
    assert "The event was not sent" in response.content.decode() and "is done" in response.content.decode()
    assert Event.objects.count() == 1


def test_the_tree_timeline_draws_a_wait_for_an_event_and_a_sleep_as_their_own_gaps(viewer_client):
    from testproject.testapp.procedures import Sleeper

    handle = waiting()
    sleeper = Sleeper.submit({"seconds": 3600})
    drain()
    html = viewer_client.get(page_url(handle.id)).content.decode()
    assert "tl-event" in html and "waiting for an event" in html
    assert "tl-sleep" in viewer_client.get(page_url(sleeper.id)).content.decode()
