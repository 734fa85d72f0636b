"""The settle point: how a claim stopped by its worker ends, decided once (``policy.interruption``).

Found by the architecture review: the choice between parking a non-idempotent
step and releasing it was written twice with different guards, a shutdown
could park a non-idempotent step that never began, and the shutdown timeout's
log said "parked" after it had released.
"""

import logging

import pytest

from django_procedures.models import Lease, ProcedureRun
from django_procedures.runtime.executor import Outcome, RunningClaim, execute
from django_procedures.runtime.worker import WorkerRuntime, resolve_config
from django_procedures.store import transitions
from django_procedures.store.claim import claim
from testproject.testapp.procedures import ChargeCard

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _claimed(handle):
    (claimed,) = claim("w", type_names=[ChargeCard.type_name], limit=1, lease_seconds=30)
    assert claimed.id == handle.id
    return RunningClaim(claimed)


def test_a_shutdown_before_a_non_idempotent_step_begins_releases_it(monkeypatch):
    """The stop lands after the step was marked unsafe but before its body ran: nothing can have taken effect."""
    handle = ChargeCard.submit({})
    running = _claimed(handle)
    real = transitions.enter_unsafe_step

    def then_stop(claimed):
        real(claimed)
        running.activity.stopping.set()  # SIGTERM arrives now, before the step's first line

    monkeypatch.setattr(transitions, "enter_unsafe_step", then_stop)
    assert execute(running) == Outcome.RELEASED
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.status, run.error, run.in_unsafe_step) == ("ready", "", False)
    assert Lease.objects.get(procedure_id=handle.id).outcome == "released"


def test_a_shutdown_inside_a_non_idempotent_step_parks_it(monkeypatch):
    handle = ChargeCard.submit({"pause": {"charge": True}})  # the step calls ctx.ensure_active() as it begins
    running = _claimed(handle)
    monkeypatch.setattr(ChargeCard, "charge", _stopping_then_checking(running), raising=True)
    assert execute(running) == Outcome.FAILED
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.status, run.error) == ("failed", "interrupted during non-idempotent step charge")
    assert run.failure_can_retry


def _stopping_then_checking(running):
    from django_procedures import step

    @step(idempotent=False)
    def charge(self, ctx):
        running.activity.stopping.set()
        ctx.ensure_active()

    return charge


def test_the_shutdown_timeout_logs_release_when_it_released_a_claim_past_its_non_idempotent_step(caplog, settings):
    """The step ended (its outcome is being written when the timeout passes): released, and the log says so."""
    caplog.set_level(logging.INFO, logger="django_procedures.worker")
    settings.PROCEDURES = {"LISTEN_NOTIFY": False}
    handle = ChargeCard.submit({})
    worker = WorkerRuntime(resolve_config(concurrency=1, lease_seconds=30))  # its threads are not started
    try:
        assert worker._claim(1) == 1
        (running,) = worker.snapshot()
        running.current = ChargeCard.steps[0]  # the non-idempotent step, which has returned
        worker._abandon(running)
    finally:
        worker.waker.close()
    assert ProcedureRun.objects.get(id=handle.id).status == "ready"
    assert worker.stats["released"] == 1 and worker.stats["failed"] == 0
    assert "still running at the shutdown timeout; released" in caplog.text
    assert "parked" not in caplog.text
