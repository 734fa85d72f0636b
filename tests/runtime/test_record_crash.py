"""The executor's last resort (``record_crash``): a failed attempt with a message that can be stored."""

import pytest

from django_procedures import registry
from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.runtime.executor import Outcome, RunningClaim, record_crash
from django_procedures.store import transitions
from django_procedures.store.claim import claim
from testproject.testapp.procedures import ThreeSteps

pytestmark = pytest.mark.django_db(transaction=True)  # record_crash closes the connection first


def claimed():
    [c] = claim("crash-test", type_names=registry.type_names(), limit=1, lease_seconds=30)
    return RunningClaim(c)


def test_the_last_resort_records_a_failed_attempt_under_the_retry_policy():
    handle = ThreeSteps.submit({})
    outcome = record_crash(claimed(), RuntimeError("cannot\x00 write \ud800"), "Traceback\x00 (most recent...)")

    assert outcome == Outcome.RETRIED  # FAST_RETRY: max_attempts=3
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "retrying" and run.failures == 1 and run.lost == 0
    assert run.error == "the worker could not record the outcome of step one: RuntimeError: cannot write \\ud800"
    assert run.traceback == "Traceback (most recent...)"
    assert list(Step.objects.filter(procedure_id=handle.id).values_list("name", "attempt", "status")) == [
        ("one", 1, "failed")]
    assert list(Lease.objects.filter(procedure_id=handle.id).values_list("outcome", flat=True)) == ["retried"]


def test_the_last_resort_leaves_alone_a_claim_it_no_longer_holds():
    handle = ThreeSteps.submit({})
    running = claimed()
    transitions.give_back(running.claim)

    assert record_crash(running, SystemExit(1), "") == Outcome.LOST
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.status, run.error) == ("ready", "")
    assert not Step.objects.filter(procedure_id=handle.id).exists()
