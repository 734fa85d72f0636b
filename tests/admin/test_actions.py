"""Retry and cancel: confirmation, outcome messages, admin log, permissions, forged POSTs."""

import re
from html import unescape

import pytest
from django.contrib.admin.models import CHANGE, LogEntry

from django_procedures.admin import ProcedureRunAdmin, actions
from django_procedures.models import ProcedureRun
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store.claim import claim
from django_procedures.testing import drain
from testproject.testapp.procedures import Leaf, Parent, Refuses, ThreeSteps, TolerantParent
from tests.admin.helpers import CANCEL, RETRY, VIEW, cancel_url, changelist_url, client_for, page_url, retry_url, staff

pytestmark = pytest.mark.django_db


def failed(n=1, **state):
    handles = [Refuses.submit(state) for _ in range(n)]
    drain()
    return [h.id for h in handles]


def waiting_tree(fanout=2):
    handle = Parent.submit({"fanout": fanout})
    (parent,) = claim("w", type_names=[Parent.type_name], limit=1, lease_seconds=30)
    execute(RunningClaim(parent))
    return handle.id, list(ProcedureRun.objects.filter(parent_id=handle.id).values_list("id", flat=True))


def act(client, action, ids, confirm=False, **extra):
    """POST the changelist's action form; with ``confirm``, as the confirmation page does (and follow it)."""
    data = {"action": action, "_selected_action": [str(i) for i in ids], "index": 0, **extra}
    if confirm:
        data["post"] = "yes"
    return client.post(changelist_url(), data, follow=confirm)


def messages_of(response) -> list[str]:
    """The messages shown on the page a POST redirected to."""
    html = response.content.decode()
    return [unescape(m) for m in re.findall(r'<li class="(?:success|warning|error|info)">(.*?)</li>', html, re.S)]


def status(pid) -> str:
    return ProcedureRun.objects.get(id=pid).status


# -- retry -------------------------------------------------------------------------------------


def test_retry_action_confirms_then_retries_through_the_store_and_logs_it(operator_client, operator):
    (refused,) = failed()
    ready = ThreeSteps.submit().id

    page = act(operator_client, "retry_selected", [refused, ready])
    html = page.content.decode()
    assert page.status_code == 200 and "Retry 1 procedure?" in html
    assert re.search(rf'data-id="{refused}" class="proc-will-change">.*?failed → ready: resumes at 1/1 · check',
                     html, re.S)
    assert re.search(rf'data-id="{ready}" class="proc-unchanged">.*?left alone: it is ready', html, re.S)
    assert 'name="csrfmiddlewaretoken"' in html and 'name="post" value="yes"' in html
    assert status(refused) == "failed"  # nothing changes before the confirmation

    done = act(operator_client, "retry_selected", [refused, ready], confirm=True)
    assert done.redirect_chain == [(changelist_url(), 302)]
    run = ProcedureRun.objects.get(id=refused)
    assert (run.status, run.retried_by, run.manual_retries) == ("ready", "operator", 1)
    assert messages_of(done) == [
        "Retried 1 procedure; it is ready again.",
        f"1 procedure was not retried: procedure {ready} is ready; only failed procedures can be retried"]
    (entry,) = LogEntry.objects.all()
    assert (entry.user_id, entry.object_id, entry.action_flag) == (operator.pk, str(refused), CHANGE)
    assert "Retried from the admin" in entry.get_change_message()


def test_a_child_of_a_finished_parent_is_left_alone_and_the_plan_says_why(operator_client):
    parent = Parent.submit({"fanout": 2, "failing": [0]})
    drain()
    leaf = ProcedureRun.objects.get(parent_id=parent.id, status="failed")
    page = act(operator_client, "retry_selected", [leaf.id]).content.decode()
    assert (f"left alone: its parent testapp.Parent {parent.id} is already rolled back, so nothing would wait for "
            "its result; retry the parent if it failed") in page
    done = act(operator_client, "retry_selected", [leaf.id], confirm=True)
    assert status(leaf.id) == "failed"
    assert f"procedure {leaf.id} cannot be retried: its parent testapp.Parent {parent.id}" in messages_of(done)[0]


def test_the_retry_plan_of_a_child_says_its_waiting_parent_counts_it_again(operator_client):
    parent = TolerantParent.submit({"fanout": 2, "failing": [0]})
    (p,) = claim("w", type_names=[TolerantParent.type_name], lease_seconds=30)
    execute(RunningClaim(p))
    leaves = {c.state["n"]: c for c in claim("w", type_names=[Leaf.type_name], limit=2, lease_seconds=30)}
    execute(RunningClaim(leaves[0]))  # fails; the parent handles it below and waits for the other leaf
    (again,) = claim("w", type_names=[TolerantParent.type_name], lease_seconds=30)
    execute(RunningClaim(again))
    page = act(operator_client, "retry_selected", [leaves[0].id]).content.decode()
    assert (f"its parent testapp.TolerantParent {parent.id} waits for it again (the parent goes on only once it "
            "finishes, and a new failure is reported to the parent again)") in page
    act(operator_client, "retry_selected", [leaves[0].id], confirm=True)
    assert status(leaves[0].id) == "ready"
    assert ProcedureRun.objects.get(id=parent.id).pending_children == 2


def test_retry_messages_count_in_the_plural(operator_client):
    ids = failed(3)
    response = act(operator_client, "retry_selected", ids, confirm=True)
    assert messages_of(response) == ["Retried 3 procedures; they are ready again."]
    assert LogEntry.objects.count() == 3


def test_a_failure_not_worth_a_manual_retry_is_left_alone(operator_client):
    (pid,) = failed(manual_retry=False)
    page = act(operator_client, "retry_selected", [pid]).content.decode()
    assert "marked not worth a manual retry" in page and "Nothing would change." in page
    act(operator_client, "retry_selected", [pid], confirm=True)
    assert status(pid) == "failed" and not LogEntry.objects.exists()


def test_retry_button_on_the_procedure_page(operator_client):
    (pid,) = failed()
    page = operator_client.get(page_url(pid)).content.decode()
    assert f'action="{retry_url(pid)}"' in page and 'id="proc-retry"' in page
    confirmation = operator_client.post(retry_url(pid))
    assert confirmation.status_code == 200 and "Retry 1 procedure?" in confirmation.content.decode()
    assert status(pid) == "failed"
    done = operator_client.post(retry_url(pid), {"post": "yes"})
    assert done.status_code == 302 and done["Location"] == page_url(pid)
    assert status(pid) == "ready" and LogEntry.objects.get().object_id == str(pid)


# -- cancel ------------------------------------------------------------------------------------


def test_cancel_action_lists_each_subtree_then_cancels_it(operator_client):
    root, children = waiting_tree(2)
    page = act(operator_client, "cancel_selected", [root]).content.decode()
    assert "Cancel 3 procedures?" in page
    for member in [root, *children]:
        assert f'class="proc-will-change" data-id="{member}"' in page
    assert "3 procedures will be cancelled" in page
    assert status(root) == "waiting"

    done = act(operator_client, "cancel_selected", [root], confirm=True)
    assert {status(m) for m in [root, *children]} == {"cancelled"}
    assert messages_of(done) == ["Cancelled 3 procedures (1 selected, with its unfinished sub-procedures)."]
    assert set(LogEntry.objects.values_list("object_id", flat=True)) == {str(m) for m in [root, *children]}
    assert ProcedureRun.objects.get(id=root).error == "cancelled by operator"


def test_cancelling_a_node_and_its_ancestor_together_cancels_once(operator_client):
    (done_already,) = failed()  # (drains first: the tree's children stay unclaimed)
    root, children = waiting_tree(2)
    page = act(operator_client, "cancel_selected", [children[0], root, done_already]).content.decode()
    assert f"included in the subtree of {root}" in page
    assert "left alone: it is already failed" in page
    response = act(operator_client, "cancel_selected", [children[0], root, done_already], confirm=True)
    assert messages_of(response)[0] == "Cancelled 3 procedures (1 selected, with its unfinished sub-procedures)."
    assert "2 procedures were left alone" in messages_of(response)[1]
    assert status(done_already) == "failed"


def test_cancel_button_on_the_procedure_page(operator_client):
    root, children = waiting_tree(1)
    assert f'action="{cancel_url(children[0])}"' in operator_client.get(page_url(children[0])).content.decode()
    response = operator_client.post(cancel_url(children[0]), {"post": "yes"}, follow=True)
    assert response.redirect_chain == [(page_url(children[0]), 302)]
    assert messages_of(response) == ["Cancelled 1 procedure (1 selected, with its unfinished sub-procedures)."]
    assert status(children[0]) == "cancelled"
    assert status(root) == "ready"  # a cancelled child is a failed child: its parent wakes up to handle it


def test_selecting_too_many_is_refused(operator_client, monkeypatch):
    monkeypatch.setattr(ProcedureRunAdmin, "action_limit", 1)
    ids = failed(2)
    response = act(operator_client, "retry_selected", ids, confirm=True)
    assert messages_of(response) == ["Select at most 1 procedures at a time; filter the list further."]
    assert {status(i) for i in ids} == {"failed"}


# -- permissions -------------------------------------------------------------------------------


def test_a_viewer_sees_neither_actions_nor_buttons(viewer_client):
    (pid,) = failed()
    root, _ = waiting_tree(1)
    listing = viewer_client.get(changelist_url()).content.decode()
    assert "retry_selected" not in listing and "cancel_selected" not in listing
    for page in (viewer_client.get(page_url(pid)).content.decode(),
                 viewer_client.get(page_url(root)).content.decode()):
        assert "proc-retry" not in page and "proc-cancel" not in page


@pytest.mark.parametrize("action", ["retry_selected", "cancel_selected"])
def test_a_forged_action_post_changes_nothing(viewer_client, action):
    (pid,) = failed()
    root, _ = waiting_tree(1)
    response = act(viewer_client, action, [pid, root], confirm=True)
    assert response.status_code in (200, 302)
    assert (status(pid), status(root)) == ("failed", "waiting")
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize("url", [retry_url, cancel_url])
def test_a_forged_button_post_is_forbidden(viewer_client, url):
    (pid,) = failed()
    assert viewer_client.post(url(pid), {"post": "yes"}).status_code == 403
    assert viewer_client.get(url(pid)).status_code == 403
    assert status(pid) == "failed" and not LogEntry.objects.exists()


def test_each_action_has_its_own_permission(db):
    (pid,) = failed()
    root, _ = waiting_tree(1)
    only_retry = client_for(staff("retrier", VIEW, RETRY))
    only_cancel = client_for(staff("canceller", VIEW, CANCEL))
    assert "retry_selected" in only_retry.get(changelist_url()).content.decode()
    assert "cancel_selected" not in only_retry.get(changelist_url()).content.decode()
    assert only_retry.post(cancel_url(root), {"post": "yes"}).status_code == 403
    assert only_cancel.post(retry_url(pid), {"post": "yes"}).status_code == 403
    assert (status(pid), status(root)) == ("failed", "waiting")


@pytest.mark.parametrize("perm", [RETRY, CANCEL])
def test_an_action_permission_without_the_view_permission_is_not_enough(db, perm):
    """Staff holding exactly one action permission: no confirmation page, no POST, no bulk action."""
    (pid,) = failed()
    root, _ = waiting_tree(1)
    blind = client_for(staff("blind", perm))
    for url in (retry_url, cancel_url):
        for target in (pid, root):
            assert blind.get(url(target)).status_code == 403
            assert blind.post(url(target), {"post": "yes"}).status_code == 403
    for action in ("retry_selected", "cancel_selected"):
        assert act(blind, action, [pid, root]).status_code == 403
        assert act(blind, action, [pid, root], confirm=True).status_code == 403
    assert (status(pid), status(root)) == ("failed", "waiting")
    assert not LogEntry.objects.exists()


def test_the_confirmation_itself_checks_the_permission(rf, db):
    """A way in that skipped the admin's own checks still cannot perform an action it may not."""
    from django.contrib.admin import site
    from django.core.exceptions import PermissionDenied

    (pid,) = failed()
    request = rf.post("/", {"post": "yes"})
    request.user = staff("blind", RETRY)
    admin = site._registry[ProcedureRun]
    with pytest.raises(PermissionDenied):
        admin.retry_selected(request, ProcedureRun.objects.filter(id=pid))
    assert status(pid) == "failed"


def test_a_post_without_the_csrf_token_is_refused(operator):
    (pid,) = failed()
    client = client_for(operator, enforce_csrf_checks=True)
    assert client.post(retry_url(pid), {"post": "yes"}).status_code == 403
    assert act(client, "retry_selected", [pid], confirm=True).status_code == 403
    assert status(pid) == "failed"


# -- the work functions, without a request -------------------------------------------------------


def test_retry_procedures_reports_what_the_store_refused():
    (pid,) = failed()
    ready = ThreeSteps.submit().id
    report = actions.retry_procedures([pid, ready], by="script")
    assert report.retried == (pid,)
    assert report.refused == ((ready, f"procedure {ready} is ready; only failed procedures can be retried"),)
    assert ProcedureRun.objects.get(id=pid).retried_by == "script"


def test_cancel_procedures_goes_ancestors_first():
    root, children = waiting_tree(2)
    report = actions.cancel_procedures([children[1], root], by="script")
    assert set(report.cancelled) == {root} and set(report.cancelled[root]) == {root, *children}
    assert report.count == 3
    assert report.unchanged == ((children[1], f"procedure {children[1]} was cancelled with an ancestor "
                                              "selected with it"),)
