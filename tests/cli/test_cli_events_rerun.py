"""``procedures send-event`` and ``procedures rerun``: what they do, refuse and print."""

from __future__ import annotations

import uuid

import pytest

from django_procedures.cli.common import actor
from django_procedures.models import Event, ProcedureRun
from django_procedures.testing import drain
from testproject.testapp.procedures import Refuses, ThreeSteps
from testproject.testapp.waiting import Approval
from tests.cli.helpers import cli

pytestmark = pytest.mark.django_db


def waiting_approval(**state):
    handle = Approval.submit(state, key=state.pop("key", None)) if "key" in state else Approval.submit(state)
    drain()
    assert handle.refresh().waiting_for == "event"
    return handle


def test_send_event_wakes_a_waiting_procedure_and_records_the_actor():
    handle = waiting_approval()
    result = cli("send-event", str(handle.id), "approved", "--payload", '{"by": "ops"}')
    assert result.code == 0, result.err
    assert "was waiting for it" in result.out
    event = Event.objects.get(procedure_id=handle.id)
    assert (event.name, event.payload, event.sent_by) == ("approved", {"by": "ops"}, actor())
    assert event.consumed_at is not None
    drain()
    assert handle.refresh().status == "done"
    assert handle.output["first"]["name"] == "approved"


def test_send_event_by_idempotency_key_and_json_and_key_dedupe():
    handle = Approval.submit({}, key="order:1234")
    doc = cli("send-event", "order:1234", "rejected", "--key", "psp-1", "--json").json()
    assert doc["procedure"] == str(handle.id) and doc["delivered"] is False and doc["duplicate"] is False
    again = cli("send-event", "order:1234", "rejected", "--key", "psp-1", "--json").json()
    assert again["duplicate"] is True and again["event"] == doc["event"]
    assert Event.objects.filter(procedure_id=handle.id).count() == 1


@pytest.mark.parametrize("args, words", [
    (["send-event", "order:nobody", "approved"], "no procedure has the id or key"),
    (["send-event", str(uuid.uuid4()), "approved"], "no procedure has the id or key"),
    (["send-event", "KEY", "approved", "--payload", "{not json"], "--payload is not JSON"),
    (["send-event", "KEY", ""], "nothing was sent"),
])
def test_send_event_refusals_exit_1_and_send_nothing(args, words):
    handle = Approval.submit({}, key="KEY")
    result = cli(*args)
    assert result.code == 1
    assert words in result.err and len(result.err.strip().splitlines()) == 1
    assert not Event.objects.filter(procedure_id=handle.id).exists()


def test_send_event_to_a_final_procedure_is_refused():
    handle = ThreeSteps.submit({})
    drain()
    result = cli("send-event", str(handle.id), "approved")
    assert result.code == 1 and "done" in result.err and "nothing was sent" in result.err


def test_rerun_from_a_step_links_the_new_run_and_records_the_actor():
    handle = ThreeSteps.submit({})
    drain()
    doc = cli("rerun", str(handle.id), "--from-step", ThreeSteps.steps[1].name, "--json").json()
    new_id = doc["reruns"][str(handle.id)]
    new = ProcedureRun.objects.get(id=new_id)
    assert new.rerun_of_id == handle.id and new.step_name == ThreeSteps.steps[1].name
    drain()
    new.refresh_from_db()
    assert new.status == "done"


def test_rerun_refusals_change_nothing():
    running = ThreeSteps.submit({})  # ready: not final
    finished = ThreeSteps.submit({})
    drain()
    late = ThreeSteps.submit({})
    before = ProcedureRun.objects.count()
    assert cli("rerun", str(late.id)).code == 1
    assert "not final" in cli("rerun", str(late.id)).err
    bad_step = cli("rerun", str(finished.id), "--from-step", "nope")
    assert bad_step.code == 1 and "has no step 'nope'" in bad_step.err
    assert cli("rerun", str(uuid.uuid4())).code == 1
    assert cli("rerun", "not-an-id").code == 1
    assert cli("rerun").code == 2  # neither ids nor --final
    assert ProcedureRun.objects.count() == before
    assert running.refresh().status == "done"


def test_rerun_final_by_filters_dry_run_then_for_real():
    ids = [Refuses.submit({}).id for _ in range(3)]
    drain()
    plan = cli("rerun", "--final", "--status", "failed", "--type", Refuses.type_name, "--dry-run", "--json").json()
    assert sorted(p["id"] for p in plan["would_rerun"]) == sorted(map(str, ids))
    assert not ProcedureRun.objects.filter(rerun_of__isnull=False).exists()
    result = cli("rerun", "--final", "--status", "failed", "--type", Refuses.type_name, "--yes")
    assert result.code == 0, result.err
    assert set(ProcedureRun.objects.filter(rerun_of__isnull=False).values_list("rerun_of_id", flat=True)) == set(ids)


def test_show_lists_events_and_the_rerun_link():
    handle = waiting_approval()
    cli("send-event", str(handle.id), "approved")
    doc = cli("show", str(handle.id), "--json").json()
    assert [e["name"] for e in doc["events"]] == ["approved"]
    text = cli("show", str(handle.id)).out
    assert "approved" in text and "consumed" in text
