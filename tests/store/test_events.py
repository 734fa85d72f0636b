"""Events in-process (``Status.wait_for_event`` / ``send_event``), on PostgreSQL and SQLite alike: delivery,
order, exactly-once, idempotent keys, timeouts at the injectable clock's time, bad input, cancel, prune."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

import django_procedures
from django_procedures import EventNotDelivered, Procedure, Status, send_event, step
from django_procedures.models import Event, KeyRequest, Lease, ProcedureRun, Step
from django_procedures.store import inbox, retention
from django_procedures.store.operations import cancel
from django_procedures.testing import drain, isolated_registry
from testproject.testapp.procedures import Approval

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
DAYS2 = timedelta(days=2)


def start(state=None, *, now=T0, key=None):
    handle = Approval.submit({"timeout": DAYS2.total_seconds(), **(state or {})}, run_after=now, key=key)
    report = drain(now=now)
    return handle.refresh(), report


def output(handle):
    return ProcedureRun.objects.get(id=handle.id).output


def test_an_event_sent_while_the_procedure_waits_makes_it_ready_and_the_next_step_sees_it():
    handle, report = start()
    assert report["waited"] == 1 and report.next_due == T0 + DAYS2
    assert (handle.status, handle.waiting_for, handle.wake_at) == ("waiting", "event", T0 + DAYS2)
    assert handle.waiting_events == ("approved", "rejected")
    assert list(Lease.objects.values_list("outcome", flat=True)) == ["completed"]  # no worker held meanwhile

    sent = send_event(handle, "approved", {"by": "ann"})
    assert sent.delivered and sent.status == "ready" and not sent.duplicate
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.status, run.waiting_for, run.wake_at, run.waiting_events) == ("ready", "", None, None)

    assert drain(now=T0 + timedelta(hours=1))["completed"] == 1
    seen = output(handle)["first"]
    assert (seen["name"], seen["payload"], seen["sent_by"]) == ("approved", {"by": "ann"}, "")
    assert output(handle)["second"] is None  # only the step after the wait sees the event
    event = Event.objects.get()
    assert (event.consumed_step, event.consumed_by, event.consumed_at is not None) == (1, "decide", True)


def test_an_event_sent_before_the_wait_is_kept_and_taken_when_the_wait_begins():
    handle = Approval.submit({}, run_after=T0)
    send_event(handle, "unrelated", 1)
    send_event(handle, "approved", "first")
    send_event(handle, "approved", "second")
    assert not Event.objects.filter(consumed_at__isnull=False).exists()
    report = drain(now=T0)  # the wait takes the oldest matching event at once: no waiting at all
    assert report["completed"] == 1 and report["waited"] == 1
    assert output(handle)["first"]["payload"] == "first"
    left = list(Event.objects.filter(consumed_at__isnull=True).order_by("id").values_list("name", "payload"))
    assert left == [("unrelated", 1), ("approved", "second")]  # each consumed exactly once, the rest kept in order


def test_each_event_is_consumed_by_one_wait_only_and_a_second_wait_takes_the_next():
    handle = Approval.submit({"names": ["approved"], "again": "approved"}, run_after=T0)
    send_event(handle, "approved", 1)
    send_event(handle, "approved", 2)
    drain(now=T0)
    assert (output(handle)["first"]["payload"], output(handle)["second"]["payload"]) == (1, 2)
    assert list(Event.objects.order_by("id").values_list("consumed_step", "consumed_by")) == [
        (1, "decide"), (2, "finish")]


def test_after_the_timeout_the_next_step_runs_with_no_event():
    handle, _ = start()
    assert drain(now=T0 + DAYS2 - timedelta(seconds=1)).claimed == 0
    assert handle.refresh().status == "waiting"
    assert drain(now=T0 + DAYS2)["completed"] == 1
    assert output(handle) == {"first": None, "second": None}
    # An event sent after the timeout is kept for a later wait, or refused once the procedure is final.
    with pytest.raises(EventNotDelivered) as refused:
        send_event(handle, "approved")
    assert refused.value.reason == "final" and "done" in str(refused.value)


def test_a_wait_without_timeout_waits_until_an_event_comes():
    handle, report = start({"timeout": None})
    assert handle.wake_at is None and report.next_due is None
    assert drain(now=T0 + timedelta(days=3650)).claimed == 0
    send_event(handle.id, "rejected")
    assert drain(now=T0 + timedelta(days=3650))["completed"] == 1
    assert output(handle)["first"]["name"] == "rejected"


def test_an_event_of_another_name_does_not_wake_the_wait():
    handle, _ = start()
    assert not send_event(handle, "shipped").delivered
    assert drain(now=T0 + timedelta(hours=1)).claimed == 0
    assert handle.refresh().status == "waiting"


def test_a_send_is_written_in_the_callers_transaction_rolled_back_never_sent():
    handle, _ = start()
    with pytest.raises(RuntimeError), transaction.atomic():
        send_event(handle, "approved")
        raise RuntimeError("the webhook view failed after sending")
    assert not Event.objects.exists() and handle.refresh().status == "waiting"


def test_a_key_makes_a_send_idempotent_per_procedure():
    handle, _ = start()
    first = send_event(handle, "approved", {"n": 1}, key="webhook-77")
    again = send_event(handle, "approved", {"n": 2}, key="webhook-77")
    assert again.duplicate and again.event_id == first.event_id and not again.delivered
    assert Event.objects.count() == 1
    other, _ = start()
    assert not send_event(other, "approved", key="webhook-77").duplicate  # keys are per procedure


def test_a_procedure_is_addressed_by_handle_id_string_or_its_idempotency_key():
    handle, _ = start(key="order:1234")
    assert send_event("order:1234", "approved").procedure_id == handle.id
    other, _ = start()
    assert send_event(str(other.id), "approved").delivered
    third, _ = start()
    assert third.send_event("rejected").delivered


def test_an_unknown_procedure_is_refused_clearly():
    with pytest.raises(EventNotDelivered, match="no procedure has the id or key 'order:none'") as refused:
        send_event("order:none", "approved")
    assert refused.value.reason == "unknown"
    with pytest.raises(EventNotDelivered, match="00000000-0000-0000-0000-000000000000"):
        send_event("00000000-0000-0000-0000-000000000000", "approved")


def test_a_cancelled_procedure_takes_no_events_and_a_cancelled_wait_is_not_woken():
    handle, _ = start()
    cancel(handle.id, by="test")
    with pytest.raises(EventNotDelivered) as refused:
        send_event(handle, "approved")
    assert refused.value.reason == "final" and "cancelled" in str(refused.value)
    assert drain(now=T0 + DAYS2 * 2).claimed == 0 and handle.refresh().status == "cancelled"


@pytest.mark.parametrize("payload", [object(), {"when": datetime.now(UTC)}, float("nan"), {1j: 2}])
def test_a_payload_that_is_not_json_is_a_type_error(payload):
    handle, _ = start()
    with pytest.raises(TypeError, match="payload must be JSON"):
        send_event(handle, "approved", payload)
    assert not Event.objects.exists()


def test_a_payload_past_max_event_bytes_is_a_value_error(settings):
    handle, _ = start()
    settings.PROCEDURES = {**settings.PROCEDURES, "MAX_EVENT_BYTES": 1000}
    send_event(handle, "other", "x" * 900)
    with pytest.raises(ValueError, match="past PROCEDURES\\['MAX_EVENT_BYTES'\\] = 1000"):
        send_event(handle, "approved", "x" * 1000)
    assert Event.objects.count() == 1


def test_the_default_max_event_bytes_is_one_mebibyte():
    handle, _ = start()
    big = "x" * (1024 * 1024 - 2)  # with its quotes: exactly 1 MiB of JSON
    assert len(json.dumps(big)) == 1024 * 1024
    send_event(handle, "other", big)
    with pytest.raises(ValueError):
        send_event(handle, "other", big + "x")


@pytest.mark.parametrize(("name", "error"), [("", ValueError), ("  ", ValueError), ("x" * 101, ValueError),
                                              (None, TypeError), (3, TypeError)])
def test_a_bad_event_name_is_refused(name, error):
    handle, _ = start()
    with pytest.raises(error, match="event name"):
        send_event(handle, name)
    assert not Event.objects.exists()


def test_unconsumed_events_are_bounded(settings):
    settings.PROCEDURES = {**settings.PROCEDURES, "MAX_UNCONSUMED_EVENTS": 3}
    handle, _ = start()
    for n in range(3):
        send_event(handle, "noise", n)
    with pytest.raises(EventNotDelivered, match="already has 3 events that no wait has taken") as refused:
        send_event(handle, "noise", 3)
    assert refused.value.reason == "full"
    assert Event.objects.count() == 3


def test_the_default_bound_is_a_thousand_unconsumed_events():
    from django_procedures.conf import DEFAULTS

    assert DEFAULTS["MAX_UNCONSUMED_EVENTS"] == 1000 and DEFAULTS["MAX_EVENT_BYTES"] == 1024 * 1024


@pytest.mark.parametrize("names", [(), ("",), ("x" * 101,)])
def test_a_wait_with_no_names_or_a_bad_name_is_a_value_error(names):
    with pytest.raises(ValueError, match="event name"):
        Status.wait_for_event(*names)


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf"), timedelta(seconds=-1), "soon"])
def test_a_bad_timeout_is_a_value_error(timeout):
    with pytest.raises(ValueError, match="timeout"):
        Status.wait_for_event("approved", timeout=timeout)


def test_lock_keys_stay_held_while_waiting_and_go_when_it_finishes():
    handle, _ = start({"keys": [["tenant:1", "exclusive"]]})
    assert list(KeyRequest.objects.values_list("name", "granted")) == [("tenant:1", True)]
    send_event(handle, "approved")
    drain(now=T0)
    assert handle.refresh().status == "done" and not KeyRequest.objects.exists()


def test_a_failed_step_after_the_wait_sees_the_same_event_on_its_retry():
    handle, _ = start({"fail_first": True})
    send_event(handle, "approved", "yes")
    drain(now=T0)
    drain(now=T0 + timedelta(minutes=5))  # past the retry's backoff
    assert output(handle)["first"]["payload"] == "yes"
    assert list(Step.objects.filter(name="decide").order_by("attempt").values_list("attempt", "status")) == [
        (1, "failed"), (2, "done")]


def test_prune_deletes_a_finished_procedures_events():
    handle, _ = start()
    send_event(handle, "approved")
    send_event(handle, "extra")
    drain(now=T0)
    assert Event.objects.count() == 2
    retention.prune_batch(T0 + timedelta(days=1))
    assert not ProcedureRun.objects.filter(id=handle.id).exists() and not Event.objects.exists()


def test_the_store_level_send_records_who_sent_it_for_the_cli_and_admin():
    handle, _ = start()
    sent = inbox.send(handle.id, "approved", {"ok": True}, sent_by="cli:ann")
    assert (sent.delivered, sent.status, sent.name) == (True, "ready", "approved")
    assert Event.objects.get().sent_by == "cli:ann"
    drain(now=T0)
    assert output(handle)["first"]["sent_by"] == "cli:ann"


def test_ctx_event_can_be_set_on_a_context_made_by_hand():
    from django_procedures import Context

    ctx = Context(procedure_id=ProcedureRun().id, type_name="x")
    assert ctx.event is None
    ctx.event = inbox.ReceivedEvent("approved", {"a": 1}, T0, "")
    assert ctx.event.payload == {"a": 1}


def test_the_public_names_are_exported_from_the_package_root():
    assert {"send_event", "EventNotDelivered"} <= set(django_procedures.__all__)


def test_execute_style_procedures_wait_and_read_ctx_event_and_a_wait_in_the_last_step_completes():

    with isolated_registry():
        class Desk(Procedure):
            type_name = "test.Desk"

            def execute(self, ctx):
                if ctx.event is not None:
                    return Status.done(output=ctx.event.payload)
                return Status.wait_for_event("answer")

        class LastWait(Procedure):
            type_name = "test.LastWait"

            @step
            def only(self, ctx):
                return Status.wait_for_event("bye")

        desk, last = Desk.submit(run_after=T0), LastWait.submit(run_after=T0)
        drain(now=T0)
        assert (desk.refresh().waiting_for, last.refresh().waiting_for) == ("event", "event")
        send_event(desk, "answer", 42)
        send_event(last, "bye")
        drain(now=T0)
        assert (desk.refresh().status, output(desk)) == ("done", 42)
        assert last.refresh().status == "done"
        assert Event.objects.get(name="bye").consumed_by == ""


@pytest.mark.parametrize(("name", "value"), [("MAX_EVENT_BYTES", "1MB"), ("MAX_UNCONSUMED_EVENTS", 0)])
def test_a_bad_limit_setting_is_a_configuration_error_naming_it(settings, name, value):
    from django.core.exceptions import ImproperlyConfigured

    handle, _ = start()
    settings.PROCEDURES = {**settings.PROCEDURES, name: value}
    with pytest.raises(ImproperlyConfigured, match=name):
        send_event(handle, "approved")
    assert not Event.objects.exists()


def test_an_event_no_wait_took_is_shown_as_never_consumed_once_the_procedure_finished(client):
    from django.contrib.auth.models import User

    from tests.admin.helpers import page_url

    handle, _ = start()
    send_event(handle, "stray")
    send_event(handle, "approved")
    drain(now=T0)
    client.force_login(User.objects.create_superuser("root", "r@example.com", "pw"))
    assert "never: no wait took it" in client.get(page_url(handle.id)).content.decode()
