"""Retrying a parent failed by its children from the admin: the page says what comes back, then it does."""

import re

import pytest
from django.contrib.admin.models import LogEntry

from django_procedures.models import ProcedureRun
from django_procedures.testing import drain
from testproject.testapp.procedures import PlainParent
from tests.admin.helpers import client_for, page_url, retry_url
from tests.admin.test_actions import act, messages_of, status

pytestmark = pytest.mark.django_db


def failed_by_children(tmp_path, failing=(0, 2)):
    handle = PlainParent.submit({"fanout": 3, "failing": list(failing), "fail_until": str(tmp_path / "fixed")})
    drain()
    assert status(handle.id) == "failed"
    # Every leaf ran before the parent resumed (drain takes them in run_at order): each failing one is failed.
    return handle.id, list(ProcedureRun.objects.filter(parent_id=handle.id, status="failed").order_by("position"))


def test_the_confirmation_lists_the_children_it_retries_then_the_post_retries_them(operator_client, operator,
                                                                                   tmp_path):
    pid, failed = failed_by_children(tmp_path)
    assert len(failed) == 2
    html = act(operator_client, "retry_selected", [pid]).content.decode()
    assert "Retry 1 procedure?" in html
    assert re.search(rf'data-id="{pid}" class="proc-will-change">.*?failed → waiting: retries 2 failed children and '
                     r"waits for them; once they finish it resumes at 2/2 · report", html, re.S)
    for child in failed:
        assert re.search(rf'<li class="proc-will-change" data-id="{child.id}">.*?testapp.Leaf.*?failed</span> → '
                         r'<span class="proc-badge proc-ready">ready</span>', html, re.S)
    assert status(pid) == "failed" and all(status(c.id) == "failed" for c in failed)  # nothing before the POST

    (tmp_path / "fixed").touch()
    done = act(operator_client, "retry_selected", [pid], confirm=True)
    assert messages_of(done) == [
        "Retried 1 procedure with 2 sub-procedures that failed them; a parent waits for what it retried."]
    parent = ProcedureRun.objects.get(id=pid)
    assert (parent.status, parent.pending_children, parent.retried_by) == ("waiting", 2, "operator")
    assert [(status(c.id), ProcedureRun.objects.get(id=c.id).retried_by) for c in failed] == [("ready", "operator")] * 2
    assert sorted(LogEntry.objects.values_list("object_id", flat=True)) == sorted(str(i) for i in [pid] + [
        c.id for c in failed])
    assert all(e.user_id == operator.pk for e in LogEntry.objects.all())
    drain()
    assert ProcedureRun.objects.get(id=pid).output == ["done", "done", "done"]


def test_a_child_that_cannot_come_back_is_named_on_the_page_and_the_post_changes_nothing(operator_client, tmp_path):
    pid, (child, other) = failed_by_children(tmp_path)
    ProcedureRun._writer.filter(id=other.id).update(failure_can_retry=False)
    html = act(operator_client, "retry_selected", [pid]).content.decode()
    assert (f"left alone: its child testapp.Leaf {other.id} failed with an error marked not worth a manual retry "
            "(NonRetryable: leaf 2 refuses)") in html and "Nothing would change." in html
    done = act(operator_client, "retry_selected", [pid], confirm=True)
    assert f"procedure {pid} cannot be retried: its child testapp.Leaf {other.id}" in messages_of(done)[0]
    assert (status(pid), status(child.id), status(other.id)) == ("failed", "failed", "failed")
    assert not LogEntry.objects.exists()


def test_the_procedure_page_says_what_a_retry_brings_back(operator_client, tmp_path):
    pid, _ = failed_by_children(tmp_path, failing=[1])
    warning = re.search(r'id="proc-retry-warning">(.*?)</p>', operator_client.get(page_url(pid)).content.decode(),
                        re.S).group(1)
    assert "A retry retries 1 failed child and waits for it, then resumes after its suspension." in warning
    assert "unless the child is retried first" not in warning


def test_forged_and_unpermitted_posts_change_nothing(viewer_client, operator, tmp_path):
    pid, failed = failed_by_children(tmp_path)
    assert viewer_client.post(retry_url(pid), {"post": "yes"}).status_code == 403
    act(viewer_client, "retry_selected", [pid], confirm=True)
    no_csrf = client_for(operator, enforce_csrf_checks=True)
    assert no_csrf.post(retry_url(pid), {"post": "yes"}).status_code == 403
    assert act(no_csrf, "retry_selected", [pid], confirm=True).status_code == 403
    assert status(pid) == "failed" and all(status(c.id) == "failed" for c in failed)
    assert not LogEntry.objects.exists()
