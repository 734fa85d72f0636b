""""Re-run from step…": the form and confirmation, many runs at once, refusals, links, its own permission."""

import re

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse

from django_procedures.models import ProcedureRun
from django_procedures.testing import drain
from testproject.testapp.procedures import Refuses, ThreeSteps
from tests.admin.helpers import CANCEL, RETRY, VIEW, changelist_url, client_for, page_url, staff
from tests.admin.test_actions import act, messages_of

pytestmark = pytest.mark.django_db
RERUN = "rerun_procedurerun"


def rerun_url(pid) -> str:
    return reverse("admin:django_procedures_procedurerun_rerun", args=[pid])


@pytest.fixture
def rerunner(db):
    return staff("rerunner", VIEW, RERUN)


@pytest.fixture
def rerunner_client(rerunner):
    return client_for(rerunner)


def done_three(n=1):
    handles = [ThreeSteps.submit() for _ in range(n)]
    drain()
    return [h.id for h in handles]


def test_the_action_lists_the_steps_then_re_runs_each_selected_run_and_logs_it(rerunner_client, rerunner):
    first, second = done_three(2)
    pending = ThreeSteps.submit().id
    page = act(rerunner_client, "rerun_selected", [first, second, pending])
    html = page.content.decode()
    assert page.status_code == 200 and "Re-run 2 procedures from a step?" in html
    assert re.findall(r'<option value="(\w+)"', html) == ["one", "two", "three"]
    assert re.search(rf'data-id="{pending}" class="proc-unchanged">.*?left alone: it is ready', html, re.S)
    assert ProcedureRun.objects.count() == 3  # nothing before the confirmation

    done = act(rerunner_client, "rerun_selected", [first, second, pending], confirm=True, from_step="three")
    assert done.redirect_chain == [(changelist_url(), 302)]
    assert messages_of(done) == [
        "Re-ran 2 procedures from step three; the new runs are ready.",
        f"1 procedure was not re-run: procedure {pending} is ready: only a final procedure (done, failed, rolled back "
        "or cancelled) can be re-run; cancel it first, or wait for it to finish"]
    for original in (first, second):
        new = ProcedureRun.objects.get(rerun_of_id=original)
        assert (new.status, new.step_name, new.state) == ("ready", "three", {"done": ["one", "two"]})
    entries = LogEntry.objects.order_by("object_id")
    assert sorted(e.object_id for e in entries) == sorted([str(first), str(second)])
    assert all(e.user_id == rerunner.pk and e.action_flag == CHANGE and "Re-run from the admin from step three"
               in e.get_change_message() for e in entries)


def test_procedures_of_two_types_are_refused_with_a_message(rerunner_client):
    (three,) = done_three()
    refused = Refuses.submit()
    drain()
    page = act(rerunner_client, "rerun_selected", [three, refused.id]).content.decode()
    assert "of 2 types (testapp.Refuses, testapp.ThreeSteps)" in page and "Nothing would change." in page
    done = act(rerunner_client, "rerun_selected", [three, refused.id], confirm=True, from_step="one")
    assert "were not re-run: the selected procedures are not of one type" in messages_of(done)[0]
    assert not ProcedureRun.objects.filter(rerun_of__isnull=False).exists()


def test_a_step_the_type_lacks_is_refused(rerunner_client):
    (pid,) = done_three()
    done = act(rerunner_client, "rerun_selected", [pid], confirm=True, from_step="nope")
    assert messages_of(done) == ["1 procedure was not re-run: 'nope' is not a step of testapp.ThreeSteps"]
    assert ProcedureRun.objects.count() == 1


def test_the_button_and_both_pages_link_the_original_and_its_re_run(rerunner_client):
    (pid,) = done_three()
    page = rerunner_client.get(page_url(pid)).content.decode()
    assert f'action="{rerun_url(pid)}"' in page and 'id="proc-rerun"' in page
    form = rerunner_client.post(rerun_url(pid)).content.decode()
    assert "Re-run 1 procedure from a step?" in form and 'id="proc-rerun-step"' in form
    done = rerunner_client.post(rerun_url(pid), {"post": "yes", "from_step": "two"})
    assert done.status_code == 302 and done["Location"] == page_url(pid)
    new = ProcedureRun.objects.get(rerun_of_id=pid)
    original_page = rerunner_client.get(page_url(pid)).content.decode()
    assert re.search(rf'id="proc-reruns"><a href="{page_url(new.id)}">', original_page)
    new_page = rerunner_client.get(page_url(new.id)).content.decode()
    assert re.search(rf'id="proc-rerun-of"><a href="{page_url(pid)}">', new_page)
    assert 'id="proc-rerun"' not in new_page  # not final: no button


def test_without_the_permission_there_is_no_action_no_button_and_a_forged_post_changes_nothing(db):
    (pid,) = done_three()
    other = client_for(staff("other", VIEW, RETRY, CANCEL))
    assert "rerun_selected" not in other.get(changelist_url()).content.decode()
    assert 'id="proc-rerun"' not in other.get(page_url(pid)).content.decode()
    assert other.post(rerun_url(pid), {"post": "yes", "from_step": "one"}).status_code == 403
    forged = act(other, "rerun_selected", [pid], confirm=True, from_step="one")
    assert forged.status_code in (200, 302)
    blind = client_for(staff("blind", RERUN))  # the action's permission without the view permission
    assert blind.post(rerun_url(pid), {"post": "yes", "from_step": "one"}).status_code == 403
    assert ProcedureRun.objects.count() == 1 and not LogEntry.objects.exists()
