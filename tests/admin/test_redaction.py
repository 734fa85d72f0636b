"""Redaction fails closed: schedule state is masked, unknown types mask every value, nothing leaks by filter."""

import json
import re
from html import unescape

import pytest
from django.test import override_settings

from django_procedures import registry
from django_procedures.admin.display import MASK
from django_procedures.admin.redaction import Redaction, redaction_for
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.testing import drain
from testproject.testapp.procedures import Secretive, ThreeSteps
from tests.admin.helpers import (
    SCHEDULE_OPERATOR,
    VIEW,
    VIEW_SCHEDULE,
    changelist_url,
    client_for,
    page_url,
    schedule_url,
    schedules_url,
    staff,
)
from tests.admin.test_schedule_admin import VALID, make

pytestmark = pytest.mark.django_db
SECRETS = {"user": "ann", "password": "hunter2", "card": {"number": "4242"}, "tags": ["t1", {"PASSWORD": "again"}]}


def assert_no_secret(html: str) -> None:
    for secret in ("hunter2", "4242", "again"):
        assert secret not in html


def textarea(html: str, name: str) -> str:
    return unescape(re.search(rf'<textarea name="{name}"[^>]*>(.*?)</textarea>', html, re.S).group(1))


# -- a procedure whose type this process does not know ------------------------------------------------


def test_an_unregistered_type_masks_every_value_of_state_and_output(db, monkeypatch):
    handle = Secretive.submit({"user": "ann", "token": "sk_live_1", "n": 7, "items": ["a", {"deep": True}]})
    drain()
    monkeypatch.delitem(registry._types, Secretive.type_name)  # renamed by a deploy: this web process lacks it
    response = client_for(staff("viewer", VIEW)).get(page_url(handle.id))
    html = unescape(response.content.decode())
    state = re.search(r'id="proc-state">.*?<pre class="proc-block">(.*?)</pre>', html, re.S).group(1)
    assert response.status_code == 200
    assert "ann" not in html and "sk_live_1" not in html
    assert json.loads(state) == {"user": MASK, "token": MASK, "n": MASK, "items": [MASK, {"deep": MASK}]}
    assert "Every value is masked" in html


def test_redaction_for_an_unknown_type_is_everything():
    assert redaction_for("gone.Renamed") == Redaction((), everything=True)
    assert redaction_for(Secretive.type_name) == Redaction(("card", "password"))


# -- the Step rows' checkpoints and the output -----------------------------------------------------------


@override_settings(PROCEDURES={"REDACT": ["password"]})
def test_committed_checkpoints_and_output_never_show_a_masked_value(db):
    handle = ThreeSteps.submit({"password": "hunter2", "user": "ann"})
    drain()
    assert handle.refresh().status == "done"
    html = client_for(staff("viewer", VIEW)).get(page_url(handle.id)).content.decode()
    assert "hunter2" not in html and "ann" in html


# -- a schedule's state ------------------------------------------------------------------------------


def test_a_viewer_sees_a_schedules_state_masked(db):
    s = make("secret", Secretive, state=SECRETS)
    response = client_for(staff("viewer", VIEW, VIEW_SCHEDULE)).get(schedule_url(s.pk))
    html = unescape(response.content.decode())
    assert response.status_code == 200
    assert_no_secret(html)
    assert '"user": "ann"' in html and f'"password": "{MASK}"' in html


def test_an_editor_sees_the_state_masked_and_saving_keeps_the_secrets(db):
    s = make("secret", Secretive, state=SECRETS)
    editor = client_for(staff("editor", *SCHEDULE_OPERATOR))
    html = editor.get(schedule_url(s.pk)).content.decode()
    assert_no_secret(html)
    shown = json.loads(textarea(html, "state"))
    assert shown["password"] == MASK and shown["card"] == MASK and shown["tags"][1]["PASSWORD"] == MASK

    shown["user"] = "bob"  # edit another key, leave the masks as they are
    response = editor.post(schedule_url(s.pk), {**VALID, "name": "secret", "procedure": Secretive.type_name,
                                                "state": json.dumps(shown)})
    assert response.status_code == 302
    assert Schedule.objects.get(pk=s.pk).state == {**SECRETS, "user": "bob"}

    shown["password"] = "new-secret"  # a value typed over the mask replaces the secret
    editor.post(schedule_url(s.pk), {**VALID, "name": "secret", "procedure": Secretive.type_name,
                                     "state": json.dumps(shown)})
    assert Schedule.objects.get(pk=s.pk).state == {**SECRETS, "user": "bob", "password": "new-secret"}


def test_a_schedule_of_an_unregistered_type_masks_every_value(db, monkeypatch):
    s = make("secret", Secretive, state=SECRETS)
    monkeypatch.delitem(registry._types, Secretive.type_name)
    html = unescape(client_for(staff("viewer", VIEW, VIEW_SCHEDULE)).get(schedule_url(s.pk)).content.decode())
    assert_no_secret(html)
    assert "ann" not in html and f'"user": "{MASK}"' in html


def test_restore_puts_back_only_values_left_masked():
    redaction = Redaction(("password",))
    stored = {"password": "p", "list": [{"password": "q"}], "other": MASK}
    edited = {"password": MASK, "list": [{"password": MASK}, {"password": MASK}], "other": MASK, "new": 1}
    assert redaction.restore(edited, stored) == {"password": "p", "list": [{"password": "q"}, {"password": MASK}],
                                                 "other": MASK, "new": 1}
    everything = Redaction((), everything=True)
    assert everything.restore({"a": MASK, "b": [MASK, 2]}, {"a": 1, "b": [3, 4]}) == {"a": 1, "b": [3, 2]}


# -- filters in the query string -------------------------------------------------------------------


@pytest.mark.parametrize("query", ["state__password__startswith=h", "output__isnull=False",
                                   "schedule__state__password=hunter2", "steps__state__password=hunter2"])
def test_the_procedures_list_refuses_filters_on_json(db, query):
    Secretive.submit({"password": "hunter2"})
    response = client_for(staff("viewer", VIEW)).get(changelist_url(query))
    assert response.status_code == 400


@pytest.mark.parametrize("query", ["state__password__startswith=h", "state__has_key=password"])
def test_the_schedules_list_refuses_filters_on_json(db, query):
    make("secret", Secretive, state=SECRETS)
    response = client_for(staff("viewer", VIEW, VIEW_SCHEDULE)).get(schedules_url(query))
    assert response.status_code == 400
    assert ProcedureRun.objects.count() == 0
