"""Durable sleep in-process (``Status.sleep``): waking at the injectable clock's time, lock keys, cancel, prune."""

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from django_procedures import clock
from django_procedures.models import KeyRequest, Lease, ProcedureRun, Step
from django_procedures.store import timers
from django_procedures.store.maintenance import maintain
from django_procedures.testing import drain
from testproject.testapp.models import Effect
from testproject.testapp.procedures import KeyHolder, Sleeper

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
TRIAL = timedelta(days=14)
X = [["tenant:1", "exclusive"]]


def start(state=None, *, now=T0):
    handle = Sleeper.submit({"seconds": TRIAL.total_seconds(), **(state or {})}, run_after=now)
    report = drain(now=now)
    return handle.refresh(), report


def test_a_fourteen_day_trial_sleeps_until_its_wake_time_and_not_a_moment_less():
    handle, report = start()
    assert report["slept"] == 1 and report.next_due == T0 + TRIAL
    assert (handle.status, handle.waiting_for, handle.wake_at) == ("waiting", "timer", T0 + TRIAL)
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.step, run.step_name, run.run_at, run.lease_owner, run.lease_expires_at) == (
        1, "after", T0 + TRIAL, "", None)
    assert list(Lease.objects.values_list("outcome", flat=True)) == ["completed"]  # the lease ended with the sleep

    early = drain(now=T0 + TRIAL - timedelta(seconds=1))
    assert early.claimed == 0 and handle.refresh().status == "waiting"
    assert early.next_due == T0 + TRIAL

    woke = drain(now=T0 + TRIAL)
    assert woke.claimed == 1 and woke["completed"] == 1
    assert (handle.refresh().status, handle.waiting_for, handle.wake_at) == ("done", None, None)
    assert list(Step.objects.filter(procedure_id=handle.id).order_by("index").values_list("name", "attempt")) == [
        ("before", 1), ("after", 1)]
    assert list(Effect.objects.order_by("id").values_list("step", flat=True)) == ["before", "after"]


def test_a_sleep_is_not_an_attempt_and_spends_no_retry_budget():
    handle, _ = start()
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.attempt, run.failures, run.lost, run.error) == (1, 0, 0, "")
    drain(now=T0 + TRIAL)
    assert ProcedureRun.objects.get(id=handle.id).state["attempt"] == 1


def test_sleeping_until_an_aware_time():
    wake = T0 + timedelta(hours=3)
    handle, report = start({"until": wake.isoformat()})
    assert handle.wake_at == wake and report.next_due == wake
    assert drain(now=wake)["completed"] == 1


def test_a_time_already_past_wakes_at_the_next_pass():
    handle, _ = start({"until": (T0 - timedelta(days=1)).isoformat()})
    assert handle.status == "done"  # the same drain() woke it: a pass wakes sleepers before each claim


def test_a_sleep_in_the_last_step_completes_once_it_wakes():
    handle, _ = start({"seconds": 60, "sleep_last": 3600})
    drain(now=T0 + timedelta(seconds=60))
    assert (handle.refresh().status, handle.waiting_for) == ("waiting", "timer")
    assert ProcedureRun.objects.get(id=handle.id).step_name == ""
    drain(now=T0 + timedelta(seconds=60 + 3599))
    assert handle.refresh().status == "waiting"
    assert drain(now=T0 + timedelta(seconds=60 + 3600))["completed"] == 1
    assert handle.refresh().status == "done"


def test_lock_keys_are_kept_while_it_sleeps():
    sleeper, _ = start({"keys": X})
    waiter = KeyHolder.submit({"keys": X}, run_after=T0)
    drain(now=T0 + timedelta(days=1))
    row = ProcedureRun.objects.get(id=waiter.id)
    assert (row.status, row.waiting_for_keys) == ("ready", True)
    assert ProcedureRun.objects.get(id=sleeper.id).keys_held
    drain(now=T0 + TRIAL)
    assert sleeper.refresh().status == "done" and waiter.refresh().status == "done"
    assert not KeyRequest.objects.exists()


def test_cancel_while_it_sleeps():
    handle, _ = start()
    handle.cancel(by="test")
    assert (handle.refresh().status, handle.waiting_for, handle.wake_at) == ("cancelled", None, None)
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.waiting_for, run.wake_at) == ("", None)
    assert drain(now=T0 + TRIAL).claimed == 0
    assert list(Effect.objects.values_list("step", flat=True)) == ["before"]


def test_the_maintenance_sweep_wakes_due_sleepers_and_leaves_the_others():
    due, _ = start({"seconds": 60})
    later, _ = start({"seconds": 3600})
    with clock.frozen_at(T0 + timedelta(seconds=60)):
        assert maintain().timers == 1
    assert due.refresh().status == "ready" and later.refresh().status == "waiting"
    assert (due.waiting_for, due.wake_at) == (None, None)


def test_the_wake_pass_works_in_batches():
    handles = [start({"seconds": 60 + i})[0] for i in range(5)]
    assert timers.wake_due(T0 + timedelta(minutes=5), batch=2) == 5
    assert {h.refresh().status for h in handles} == {"ready"}
    assert timers.next_wake() is None


def test_prune_never_deletes_a_sleeping_procedure():
    handle, _ = start()
    out = StringIO()
    with clock.frozen_at(T0 + timedelta(days=400)):
        call_command("procedures_prune", "--older-than", "1d", stdout=out)
    assert "pruned 0 trees" in out.getvalue()
    assert handle.refresh().status == "waiting"


def test_no_wake_pass_per_claim_only_when_a_sleeper_can_be_due(monkeypatch):
    """A wake pass is a statement: drain() runs one first and one when nothing is left, not one per claim; and
    the due times tell a ready run (claimed as it is) from a sleeper's wake time (worth a wake pass)."""
    from django_procedures.store import due
    from testproject.testapp.procedures import ThreeSteps

    passes, real = [], timers.wake_due
    monkeypatch.setattr(timers, "wake_due", lambda *a, **k: passes.append(1) or real(*a, **k))
    ThreeSteps.submit_many([{} for _ in range(5)])
    assert drain().claimed == 5
    assert len(passes) == 3, passes  # the sweep, the start and the end; it was one per claim: 7

    ThreeSteps.submit({})
    times = due.due_times(type_names=[ThreeSteps.type_name])
    assert times.run_at is not None and times.wake_at is None and times.earliest == times.run_at
