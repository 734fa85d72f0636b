"""The read-only procedure page: tree with reasons, timeline, leases, redacted JSON, errors."""

import re

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_procedures.admin import reads
from django_procedures.models import ProcedureRun
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store.claim import claim
from django_procedures.testing import drain
from testproject.testapp.procedures import Compensated, Flaky, KeyHolder, Parent, Refuses, Secretive, ThreeSteps
from tests.admin.helpers import changelist_url, page_url
from tests.runs import page_text

pytestmark = pytest.mark.django_db


def spawned_parent(fanout=3):
    """A Parent whose first step ran: waiting for ``fanout`` ready children."""
    handle = Parent.submit({"fanout": fanout})
    (parent,) = claim("w", type_names=[Parent.type_name], limit=1, lease_seconds=30)
    execute(RunningClaim(parent))
    return handle, list(ProcedureRun.objects.filter(parent_id=handle.id).order_by("position"))


def test_the_tree_with_breadcrumb_to_the_root_and_why_each_node_waits(operator_client):
    parent, children = spawned_parent(3)
    response = operator_client.get(page_url(children[1].id))
    html, text = response.content.decode(), page_text(response)
    assert response.status_code == 200
    breadcrumbs = html[html.index('class="breadcrumbs"'):html.index("</div>", html.index('class="breadcrumbs"'))]
    assert page_url(parent.id) in breadcrumbs
    assert "Tree (4 procedures)" in text
    for member in [parent.id, *[c.id for c in children]]:
        assert page_url(member) in html
    assert f'class="proc-current" data-id="{children[1].id}"' in html
    assert "waiting for children: 3 left" in text
    assert "and waiting for a worker of its queue to claim it" in text
    assert "2/2 · collect" in text  # the parent's next step, of its two


def test_a_waiting_parent_counts_its_children_left_as_they_finish(operator_client):
    parent, _ = spawned_parent(3)
    (child,) = claim("w", type_names=["testapp.Leaf"], limit=1, lease_seconds=30)
    assert execute(RunningClaim(child)) == "completed"
    # A child ending done does not count itself off the parent's row: the page counts the unfinished ones.
    assert "waiting for children: 2 left" in page_text(operator_client.get(page_url(parent.id)))


def test_a_running_procedure_is_leased_and_a_key_waiter_names_the_holder(operator_client):
    holder = KeyHolder.submit({"keys": [["tenant:acme", "exclusive"]]})
    (claimed,) = claim("worker-7@host", type_names=[KeyHolder.type_name], limit=1, lease_seconds=30)
    assert claimed.id == holder.id
    waiter = KeyHolder.submit({"keys": [["tenant:acme", "exclusive"]]})
    assert claim("worker-8@host", type_names=[KeyHolder.type_name], limit=1, lease_seconds=30) == []

    holder_text = page_text(operator_client.get(page_url(holder.id)))
    # How long ago depends on how busy the machine is: the words around it do not.
    assert re.search(r"running, leased by worker worker-7@host; last heartbeat [0-9][0-9a-z. ]* ago \(lease expires in",
                     holder_text), holder_text
    waiter_text = page_text(operator_client.get(page_url(waiter.id)))
    assert f"waiting for lock key 'tenant:acme' (exclusive) held by procedure {holder.id}" in waiter_text


def test_backing_off_and_unknown_types(operator_client):
    flaky = Flaky.submit({"fail_times": 1})
    drain()
    assert "backing off until" in page_text(operator_client.get(page_url(flaky.id)))
    assert "after attempt 1 failed: RuntimeError: flaky failure on attempt 1" in page_text(
        operator_client.get(page_url(flaky.id)))

    orphan = ThreeSteps.submit()
    ProcedureRun._writer.filter(id=orphan.id).update(type_name="gone.Renamed")
    text = page_text(operator_client.get(page_url(orphan.id)))
    assert "no running worker knows its type gone.Renamed" in text
    assert "not registered in this process" in text


def test_step_timeline_and_lease_history(operator_client):
    flaky = Flaky.submit({"fail_times": 1})
    drain()
    ProcedureRun._writer.filter(id=flaky.id).update(run_at="2000-01-01T00:00Z")
    drain()
    response = operator_client.get(page_url(flaky.id))
    html = response.content.decode()
    steps = re.findall(r"<tr><td>(\d+)</td><td>(\w+)</td><td><span class=\"proc-badge proc-(\w+)\">\w+</span></td>"
                       r"<td>(\d+)</td>", html)
    assert steps == [("0", "prepare", "done", "1"), ("1", "work", "failed", "1"), ("1", "work", "done", "2")]
    assert "RuntimeError: flaky failure on attempt 1" in html
    leases = re.findall(r"<tr><td>(\d+)</td><td>(drain:\d+)</td>.*?<td>(\w+)</td></tr>", html)
    assert [(token, outcome) for token, _, outcome in leases] == [("2", "completed"), ("1", "retried")]


@override_settings(PROCEDURES={"REDACT": ["api_key"]})
def test_state_and_output_are_pretty_json_with_redacted_keys_masked(operator_client):
    handle = Secretive.submit({"user": "ann", "password": "hunter2", "card": {"number": "4242"},
                               "nested": [{"api_key": "sk_live_1"}, {"PASSWORD": "again"}]})
    drain()
    response = operator_client.get(page_url(handle.id))
    html = response.content.decode()
    for secret in ("hunter2", "4242", "sk_live_1", "again"):
        assert secret not in html
    assert "&quot;user&quot;: &quot;ann&quot;" in html  # pretty-printed, two-space indent
    assert "\n  &quot;password&quot;: &quot;••••••&quot;" in html
    assert "Masked keys: api_key, card, password" in page_text(response)

    done = ThreeSteps.submit()
    drain()
    assert "&quot;done&quot;: [" in operator_client.get(page_url(done.id)).content.decode()


def test_error_traceback_and_rollback_error_in_readable_blocks(operator_client):
    refused = Refuses.submit()
    both = Compensated.submit({"rollback_fails": 5})
    drain()  # the rollback retries at once (initial_delay=0): one drain runs it to the end
    html = operator_client.get(page_url(refused.id)).content.decode()
    assert '<pre class="proc-block proc-error">NonRetryable: the tenant does not exist</pre>' in html
    assert "Traceback (most recent call last)" in html
    assert "in step check" in html and "retryable by hand" in html
    assert ProcedureRun.objects.get(id=both.id).status == "failed"  # its rollback failed for good too
    text = page_text(operator_client.get(page_url(both.id)))
    assert "NonRetryable: the supplier said no" in text
    assert "Rollback error RuntimeError: rollback attempt 2 failed" in text


def test_the_page_is_read_only(operator_client):
    refused = Refuses.submit()
    drain()
    response = operator_client.post(page_url(refused.id), {"status": "done", "error": ""})
    assert response.status_code == 200
    assert ProcedureRun.objects.get(id=refused.id).status == "failed"
    assert 'name="_save"' not in response.content.decode()


def test_unknown_ids_redirect_to_the_list_with_a_message(operator_client):
    response = operator_client.get(page_url("not-a-uuid"))
    assert response.status_code == 302 and response["Location"].startswith(changelist_url())


def test_the_query_count_does_not_grow_with_the_tree(operator_client):
    def queries_for(fanout):
        _, children = spawned_parent(fanout)
        operator_client.get(page_url(children[0].id))
        with CaptureQueriesContext(connection) as captured:
            assert operator_client.get(page_url(children[0].id)).status_code == 200
        return len(captured)

    assert queries_for(2) == queries_for(20)


def test_a_tree_larger_than_the_page_still_shows_the_path_to_the_procedure(operator_client, monkeypatch):
    monkeypatch.setattr(reads, "TREE_LIMIT", 3)
    parent, children = spawned_parent(5)
    last = children[-1]
    response = operator_client.get(page_url(last.id))
    html = response.content.decode()
    assert "The tree is larger than this page shows" in html
    assert f'class="proc-current" data-id="{last.id}"' in html
    assert f'data-id="{parent.id}"' in html


def test_a_procedure_over_its_limit_names_the_limit_and_its_use(operator_client):
    from testproject.testapp.procedures import Limited

    held = [Limited.submit({"concurrency": [["crm-api", 2]]}) for _ in range(2)]
    waiter = Limited.submit({"concurrency": [["crm-api", 2]]})
    assert len(claim("worker-7@host", type_names=[Limited.type_name], limit=5, lease_seconds=30)) == len(held)
    text = page_text(operator_client.get(page_url(waiter.id)))
    assert "over its limit crm-api: 2 of 2 running" in text, text
