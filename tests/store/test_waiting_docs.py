"""The event examples of docs/waiting.md, run as written: each block is read from the page and executed."""

import json
import re
from pathlib import Path

import pytest
from django.test import RequestFactory

from django_procedures import Procedure, Status, step
from django_procedures.models import Event, ProcedureRun
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store.claim import claim
from django_procedures.testing import drain, isolated_registry

pytestmark = pytest.mark.django_db
PAGE = Path(__file__).resolve().parents[2] / "docs" / "waiting.md"


def block(containing: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    (found,) = [b for b in blocks if containing in b]
    return found


@pytest.fixture
def page():
    """A namespace with the Refund class of the page defined in it, and its helpers recorded."""
    calls = []
    namespace = {
        "ask_a_manager": lambda order: calls.append(("ask", order)),
        "escalate": lambda order: calls.append(("escalate", order)),
        "pay_back": lambda order, amount: calls.append(("pay", order, amount)),
        "record_delivery": lambda body: calls.append(("delivery", body["delivery_id"])),
        "calls": calls,
    }
    with isolated_registry():
        exec(block("class Refund"), namespace)
        yield namespace


def test_the_approval_flows_test_passes_as_written(page):
    exec(block("def test_a_refund_is_approved_or_times_out"), page)
    page["test_a_refund_is_approved_or_times_out"]()
    assert ("pay", 1, 20) in page["calls"] and ("escalate", 2) in page["calls"]
    decisions = dict(ProcedureRun.objects.values_list("key", "state__decision"))
    assert decisions == {"refund:1": "approved", "refund:2": "timed out"}


def test_the_webhook_view_sends_in_its_own_atomic_and_a_retried_delivery_is_one_event(page):
    exec(block("def refund_webhook"), page)
    view = page["refund_webhook"]
    handle = page["Refund"].submit({"order": 9}, key="refund:9")
    drain()
    body = {"order": 9, "decision": "rejected", "delivery_id": "d-1"}

    def post(data):
        return view(RequestFactory().post("/hook", json.dumps(data), content_type="application/json"))

    assert post(body).status_code == 204
    assert post(body).status_code == 204  # the provider retried: the same key, no second event
    assert Event.objects.filter(procedure_id=handle.id).count() == 1
    drain()
    assert handle.refresh().status == "done"
    assert ProcedureRun.objects.get(id=handle.id).state["decision"] == "rejected"
    assert post({**body, "delivery_id": "d-2"}).status_code == 409  # finished: refused, nothing written
    assert post({**body, "order": 404, "delivery_id": "d-3"}).status_code == 404
    assert Event.objects.count() == 1


def test_an_event_sent_while_the_children_run_is_taken_by_the_wait_after_them():
    with isolated_registry():
        class CopyData(Procedure):
            type_name = "shop.CopyData"

            @step
            def copy(self, ctx):
                pass

        namespace = {"CopyData": CopyData, "Procedure": Procedure, "Status": Status, "step": step,
                     "timedelta": __import__("datetime").timedelta}
        exec(block("class Onboarding"), namespace)
        from django_procedures import send_event

        handle = namespace["Onboarding"].submit({"account": 7}, key="onboarding:7")
        (held,) = claim("w", type_names=["shop.Onboarding"], lease_seconds=60)
        execute(RunningClaim(held))  # suspended on its child, which has not run
        assert handle.refresh().waiting_for == "children"
        send_event("onboarding:7", "signed")  # before the wait: kept
        drain()
        assert handle.refresh().status == "done"
        assert ProcedureRun.objects.get(id=handle.id).state["signed"] is True


def test_the_tasks_example_starts_a_procedure_that_waits():
    from testproject.testapp.tasks import approval_requested

    written = block("def refund_requested")
    assert "Refund.submit({\"order\": order}, key=f\"refund:{order}\")" in written  # the task below mirrors it
    result = approval_requested.enqueue(5)
    drain()
    waiting = ProcedureRun.objects.get(key="approval:5")
    assert (waiting.status, waiting.waiting_for) == ("waiting", "event")
    result.refresh()
    assert result.return_value == str(waiting.id)
