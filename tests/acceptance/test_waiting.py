"""Acceptance: docs/waiting.md read as a user would, using public names only (package root, drain)."""

import math
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from django_procedures import EventNotDelivered, Procedure, Status, send_event, step
from django_procedures.testing import drain

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 6, 1, tzinfo=UTC)


class Trial(Procedure):
    type_name = "acc.Trial"

    @step
    def start_trial(self, ctx):
        self.state["started"] = True
        return Status.sleep(timedelta(days=14))

    @step
    def end_trial(self, ctx):
        self.state["ended"] = True


class Refund(Procedure):
    type_name = "acc.Refund"

    @step
    def ask(self, ctx):
        return Status.wait_for_event("approved", "rejected", timeout=timedelta(days=2))

    @step
    def decide(self, ctx):
        self.state["decision"] = ctx.event.name if ctx.event else "timed out"
        self.state["payload"] = ctx.event.payload if ctx.event else None
        self.state["sent_by"] = ctx.event.sent_by if ctx.event else None
        self.state["sent_at"] = ctx.event.sent_at.isoformat() if ctx.event else None
        return Status.done(output=self.state["decision"])


class SecondsWait(Procedure):
    type_name = "acc.SecondsWait"

    @step
    def wait(self, ctx):
        return Status.wait_for_event("go", timeout=60)

    @step
    def after(self, ctx):
        return Status.done(output=ctx.event.name if ctx.event else None)


class Forever(Procedure):
    type_name = "acc.Forever"

    @step
    def wait(self, ctx):
        return Status.wait_for_event("go")

    @step
    def after(self, ctx):
        return Status.done(output=ctx.event.payload)


class LastSleep(Procedure):
    type_name = "acc.LastSleep"

    @step
    def only(self, ctx):
        return Status.sleep(30)


def test_the_trial_example_of_the_doc():
    handle = Trial.submit({"account": 7}, run_after=T0)
    report = drain(now=T0)
    assert (handle.refresh().waiting_for, handle.wake_at) == ("timer", T0 + timedelta(days=14))
    assert handle.status == "waiting"
    assert report.next_due == T0 + timedelta(days=14)
    assert drain(now=T0 + timedelta(days=14) - timedelta(seconds=1)).claimed == 0
    drain(now=T0 + timedelta(days=14))
    assert handle.refresh().status == "done"
    assert (handle.waiting_for, handle.wake_at) == (None, None)


def test_a_sleep_in_the_last_step_finishes_done_with_output_none():
    handle = LastSleep.submit({}, run_after=T0)
    drain(now=T0)
    assert handle.refresh().status == "waiting"
    drain(now=T0 + timedelta(seconds=30))
    assert handle.refresh().status == "done"
    assert handle.output is None


@pytest.mark.parametrize("args,kwargs", [
    ((-1,), {}), ((math.nan,), {}), ((math.inf,), {}), ((timedelta(seconds=-1),), {}),
    ((timedelta(days=365 * 101),), {}), ((), {"until": datetime(2030, 1, 1)}), ((), {}),
    ((5,), {"until": T0}),
])
def test_bad_sleeps_are_value_errors_where_called(args, kwargs):
    with pytest.raises(ValueError):
        Status.sleep(*args, **kwargs)


def test_sleep_until_an_aware_time_is_accepted():
    Status.sleep(until=T0)
    Status.sleep(0)


def test_the_refund_example_of_the_doc():
    approved = Refund.submit({"order": 1}, key="refund:1", run_after=T0)
    unanswered = Refund.submit({"order": 2}, key="refund:2", run_after=T0)
    drain(now=T0)
    assert approved.refresh().waiting_for == "event"
    assert approved.wake_at == T0 + timedelta(days=2)
    assert tuple(approved.waiting_events) == ("approved", "rejected")

    send_event("refund:1", "approved", {"amount": 20})
    drain(now=T0 + timedelta(hours=1))
    assert approved.refresh().status == "done"
    assert approved.output == "approved"
    assert unanswered.refresh().status == "waiting"

    drain(now=T0 + timedelta(days=2))
    assert unanswered.refresh().status == "done"
    assert unanswered.output == "timed out"


def test_send_event_returns_what_it_did():
    handle = Refund.submit({"order": 3}, key="refund:3", run_after=T0)
    kept = send_event(handle, "other")
    assert (kept.delivered, kept.duplicate, kept.name, kept.status) == (False, False, "other", "ready")
    assert str(kept.procedure_id) == str(handle.id) and kept.event_id is not None
    drain(now=T0)
    sent = handle.send_event("approved", {"amount": 1}, key="k1")
    assert (sent.delivered, sent.duplicate, sent.status) == (True, False, "ready")
    again = handle.send_event("approved", {"amount": 2}, key="k1")
    assert again.duplicate and again.event_id == sent.event_id
    drain(now=T0 + timedelta(hours=1))
    assert handle.refresh().run.state["payload"] == {"amount": 1}
    assert handle.run.state["sent_by"] == ""


def test_send_event_by_id_text():
    handle = Forever.submit({}, run_after=T0)
    drain(now=T0)
    assert handle.refresh().wake_at is None and handle.waiting_for == "event"
    send_event(str(handle.id), "go", [1, 2])
    drain(now=T0)
    assert handle.refresh().output == [1, 2]


def test_a_timeout_in_seconds():
    handle = SecondsWait.submit({}, run_after=T0)
    drain(now=T0)
    assert handle.refresh().wake_at == T0 + timedelta(seconds=60)
    drain(now=T0 + timedelta(seconds=60))
    assert handle.refresh().status == "done" and handle.output is None


def test_an_event_sent_in_a_rolled_back_transaction_is_never_sent():
    handle = Forever.submit({}, run_after=T0)
    drain(now=T0)
    with pytest.raises(RuntimeError), transaction.atomic():
        send_event(handle, "go", 1)
        raise RuntimeError
    assert handle.refresh().status == "waiting"


@pytest.mark.parametrize("status", ["done", "cancelled"])
def test_a_final_procedure_refuses_events_with_reason_final(status):
    handle = Forever.submit({}, run_after=T0)
    drain(now=T0)
    if status == "cancelled":
        handle.cancel()
    else:
        send_event(handle, "go", 1)
        drain(now=T0)
    with pytest.raises(EventNotDelivered) as refused:
        send_event(handle, "go")
    assert refused.value.reason == "final"
    assert str(refused.value.procedure_id) == str(handle.id)


@pytest.mark.parametrize("target", ["no-such-key", "0190d7a2-5c3e-7b1a-9f00-2d4e6a8b0c1d"])
def test_an_unknown_procedure_is_reason_unknown(target):
    with pytest.raises(EventNotDelivered) as refused:
        send_event(target, "go")
    assert refused.value.reason == "unknown" and refused.value.procedure_id is None


def test_the_unconsumed_events_bound(settings):
    settings.PROCEDURES = {**getattr(settings, "PROCEDURES", {}), "MAX_UNCONSUMED_EVENTS": 3}
    handle = Forever.submit({}, run_after=T0)
    for i in range(3):
        send_event(handle, "x", i)
    with pytest.raises(EventNotDelivered) as refused:
        send_event(handle, "x", 4)
    assert refused.value.reason == "full"


@pytest.mark.parametrize("name,error", [("", ValueError), ("   ", ValueError), ("n" * 101, ValueError),
                                        (5, TypeError), (None, TypeError)])
def test_bad_event_names(name, error):
    handle = Forever.submit({}, run_after=T0)
    with pytest.raises(error):
        send_event(handle, name)


def test_a_name_of_100_characters_is_accepted():
    handle = Forever.submit({}, run_after=T0)
    send_event(handle, "n" * 100)
    Status.wait_for_event("n" * 100)


@pytest.mark.parametrize("payload", [datetime(2030, 1, 1), object(), math.nan, {1, 2}])
def test_payloads_that_are_not_json_are_type_errors(payload):
    handle = Forever.submit({}, run_after=T0)
    with pytest.raises(TypeError):
        send_event(handle, "go", payload)


def test_a_payload_over_max_event_bytes(settings):
    settings.PROCEDURES = {**getattr(settings, "PROCEDURES", {}), "MAX_EVENT_BYTES": 100}
    handle = Forever.submit({}, run_after=T0)
    with pytest.raises(ValueError):
        send_event(handle, "go", "x" * 200)
    send_event(handle, "go", "x" * 10)


@pytest.mark.parametrize("names,kwargs", [((), {}), (("",), {}), (("n" * 101,), {}),
                                          (("a",), {"timeout": -1}), (("a",), {"timeout": math.nan}),
                                          (("a",), {"timeout": math.inf}),
                                          (("a",), {"timeout": timedelta(days=365 * 101)})])
def test_bad_waits_are_value_errors(names, kwargs):
    with pytest.raises(ValueError):
        Status.wait_for_event(*names, **kwargs)


def test_a_bad_sleep_inside_a_step_is_a_failed_attempt_saying_what_to_pass():
    class BadSleep(Procedure):
        type_name = "acc.BadSleep"

        @step
        def only(self, ctx):
            return Status.sleep(-5)

    handle = BadSleep.submit({}, run_after=T0)
    drain(now=T0)
    handle.refresh()
    assert handle.status in ("retrying", "failed")
    assert handle.error


def test_the_default_max_event_bytes_counts_json_text_in_bytes():
    handle = Forever.submit({}, run_after=T0)
    send_event(handle, "go", "x" * (1024 * 1024 - 2))  # exactly 1 MiB of JSON text with its quotes
    with pytest.raises(ValueError):
        send_event(handle, "go", "x" * (1024 * 1024 - 1))
    with pytest.raises(ValueError):  # 600,000 characters, 1.2 MB of UTF-8
        send_event(handle, "go", "é" * 600_000)


def test_two_procedures_may_each_have_an_event_with_the_same_key():
    one, two = Forever.submit({}, run_after=T0), Forever.submit({}, run_after=T0)
    assert not send_event(one, "go", 1, key="same").duplicate
    assert not send_event(two, "go", 2, key="same").duplicate
    drain(now=T0)
    assert (one.refresh().output, two.refresh().output) == (1, 2)


def test_a_timeout_of_zero_takes_a_kept_event_or_times_out_at_once():
    class ZeroWait(Procedure):
        type_name = "acc.ZeroWait"

        @step
        def wait(self, ctx):
            return Status.wait_for_event("go", timeout=0)

        @step
        def after(self, ctx):
            return Status.done(output=ctx.event.payload if ctx.event else "none")

    kept = ZeroWait.submit({}, run_after=T0)
    send_event(kept, "go", "kept")
    empty = ZeroWait.submit({}, run_after=T0)
    drain(now=T0)
    assert (kept.refresh().status, kept.output) == ("done", "kept")
    assert (empty.refresh().status, empty.output) == ("done", "none")


def test_sleep_takes_delay_by_keyword_and_a_past_until_wakes_at_once():
    Status.sleep(delay=5)
    Status.sleep(delay=timedelta(minutes=1))

    class PastSleep(Procedure):
        type_name = "acc.PastSleep"

        @step
        def first(self, ctx):
            return Status.sleep(until=T0 - timedelta(days=1))

        @step
        def second(self, ctx):
            return Status.done(output="woke")

    handle = PastSleep.submit({}, run_after=T0)
    drain(now=T0)
    assert (handle.refresh().status, handle.output) == ("done", "woke")


def test_events_are_taken_in_the_order_they_were_sent_one_per_wait():
    class TwoWaits(Procedure):
        type_name = "acc.TwoWaits"

        @step
        def w1(self, ctx):
            return Status.wait_for_event("a", "b")

        @step
        def w2(self, ctx):
            self.state["first"] = ctx.event.payload
            return Status.wait_for_event("a", "b")

        @step
        def end(self, ctx):
            return Status.done(output=[self.state["first"], ctx.event.payload])

    handle = TwoWaits.submit({}, run_after=T0)
    send_event(handle, "b", 1)
    send_event(handle, "a", 2)
    send_event(handle, "b", 3)
    drain(now=T0)
    assert (handle.refresh().status, handle.output) == ("done", [1, 2])


def test_a_sleeping_procedure_is_cancelled_and_never_wakes():
    handle = Trial.submit({}, run_after=T0)
    drain(now=T0)
    handle.cancel()
    assert handle.refresh().status == "cancelled"
    assert drain(now=T0 + timedelta(days=15)).claimed == 0
    assert handle.refresh().status == "cancelled"


def test_a_handle_of_a_ready_procedure_waits_for_nothing():
    handle = Trial.submit({}, run_after=T0)
    assert (handle.waiting_for, handle.wake_at) == (None, None)
    assert tuple(handle.waiting_events) == ()


# PostgreSQL refuses a NUL character or a lone surrogate in text and jsonb with a DataError at the INSERT (which
# also breaks the caller's transaction), where SQLite stored them: both are refused the same way before writing.
@pytest.mark.parametrize("payload", [{"a": "x\x00y"}, "\ud800", {"k\x00": 1}, (1, 2)])
def test_a_payload_the_database_cannot_keep_is_a_type_error_and_the_transaction_goes_on(payload):
    handle = Forever.submit({}, run_after=T0)
    with pytest.raises(TypeError):
        send_event(handle, "go", payload)
    send_event(handle, "go", "fine")  # the caller's transaction is still usable
    drain(now=T0)
    assert handle.refresh().output == "fine"


@pytest.mark.parametrize("name", ["g\x00o", "go\ud800"])
def test_an_event_name_the_database_cannot_keep_is_a_value_error(name):
    handle = Forever.submit({}, run_after=T0)
    with pytest.raises(ValueError):
        send_event(handle, name)
    with pytest.raises(ValueError):
        Status.wait_for_event(name)
    with pytest.raises(ValueError):
        send_event(handle, "go", key=name)
    send_event(handle, "go", "fine")


@pytest.mark.parametrize("target", ["order\x00:1", "order\ud800", ""])
def test_a_target_no_key_can_be_is_unknown_and_the_transaction_goes_on(target):
    handle = Forever.submit({}, run_after=T0)
    with pytest.raises(EventNotDelivered) as refused:
        send_event(target, "go")
    assert refused.value.reason == "unknown"
    send_event(handle, "go", "fine")


class CopyData(Procedure):
    type_name = "acc.CopyData"

    @step
    def copy(self, ctx):
        self.state["copied"] = True
        if self.state.get("signal"):  # the contract is signed while the copy runs
            send_event(self.state["signal"], "signed")


class Onboarding(Procedure):
    type_name = "acc.Onboarding"

    @step
    def start(self, ctx):
        return Status.suspended([CopyData(state={"account": self.state["account"],
                                                 "signal": self.state.get("signal")})])

    @step
    def await_signature(self, ctx):
        return Status.wait_for_event("signed", timeout=timedelta(days=30))

    @step
    def welcome(self, ctx):
        self.state["signed"] = ctx.event is not None
        return Status.done(output=self.state["signed"])


@pytest.mark.parametrize("when", ["before", "while_children_run", "after"])
def test_the_onboarding_example_takes_the_event_whenever_it_comes(when):
    signal = "onboarding:7" if when == "while_children_run" else None
    handle = Onboarding.submit({"account": 7, "signal": signal}, key="onboarding:7", run_after=T0)
    if when == "before":
        send_event("onboarding:7", "signed")
    drain(now=T0)
    if when == "after":
        assert handle.refresh().waiting_for == "event"
        send_event("onboarding:7", "signed")
        drain(now=T0)
    assert (handle.refresh().status, handle.output) == ("done", True)


def test_the_onboarding_example_times_out_after_thirty_days():
    handle = Onboarding.submit({"account": 8}, key="onboarding:8", run_after=T0)
    drain(now=T0)
    drain(now=T0 + timedelta(days=30))
    assert (handle.refresh().status, handle.output) == ("done", False)


def test_an_event_sent_from_a_step_under_drain_is_sent_at_drains_clock():
    class Sender(Procedure):
        type_name = "acc.Sender"

        @step
        def send(self, ctx):
            send_event("refund:9", "approved")

    refund = Refund.submit({"order": 9}, key="refund:9", run_after=T0)
    drain(now=T0)
    Sender.submit({}, run_after=T0 + timedelta(hours=1))
    drain(now=T0 + timedelta(hours=1))
    drain(now=T0 + timedelta(hours=1))
    run = refund.refresh().run
    assert (refund.status, run.state["payload"], run.state["sent_at"]) == (
        "done", None, (T0 + timedelta(hours=1)).isoformat())


def test_a_retried_delivery_after_the_procedure_finished_is_a_harmless_duplicate():
    # docs/waiting.md's webhook: "The provider's delivery id as key makes a retried delivery harmless"; the
    # webhook answers 409 to EventNotDelivered(reason="final"), so a repeat of a delivered key must not raise it.
    handle = Refund.submit({"order": 5}, key="refund:5", run_after=T0)
    drain(now=T0)
    first = send_event("refund:5", "approved", {"amount": 1}, key="delivery-1")
    drain(now=T0)
    assert handle.refresh().status == "done"
    again = send_event("refund:5", "approved", {"amount": 1}, key="delivery-1")
    assert again.duplicate and again.event_id == first.event_id and again.status == "done"
    with pytest.raises(EventNotDelivered) as refused:  # a new delivery is refused
        send_event("refund:5", "approved", {"amount": 1}, key="delivery-2")
    assert refused.value.reason == "final"
