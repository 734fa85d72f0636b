"""Paths that need real commits: the worker's own transactions, outside any test transaction."""

import pytest
from django.db import connection

from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.testing import drain
from testproject.testapp.models import Effect
from testproject.testapp.procedures import Flaky, NonAtomicSteps, ThreeSteps
from tests.store.test_engine import StolenDuringStep

pytestmark = pytest.mark.django_db(transaction=True)


def test_drain_outside_a_transaction_commits_each_checkpoint():
    handles = [ThreeSteps.submit(), NonAtomicSteps.submit(), Flaky.submit({"fail_times": 1})]
    assert not connection.in_atomic_block
    drain()
    assert [h.refresh().status for h in handles] == ["done", "done", "retrying"]
    assert Step.objects.filter(status="done").count() == 3 + 2 + 1
    assert Effect.objects.filter(step="work").count() == 0
    assert not Lease.objects.filter(released_at__isnull=True).exists()


def test_a_late_checkpoint_outside_a_transaction_is_fenced_out():
    handle = StolenDuringStep.submit()
    assert drain()["lost"] == 1
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.state == {} and not Step.objects.filter(procedure_id=handle.id).exists()
