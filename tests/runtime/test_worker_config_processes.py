"""A real procedures_worker whose options contradict PROCEDURES exits at start, saying what to change."""

from __future__ import annotations

import pytest

from django_procedures import RunStatus
from django_procedures.models import ProcedureRun, Worker
from testproject.testapp.procedures import ThreeSteps

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

WAIT = 60.0


@pytest.mark.postgres
def test_a_lease_longer_than_the_idle_transaction_timeout_stops_the_worker_before_it_claims(workers):
    handle = ThreeSteps.submit({})
    # PROCEDURES alone passes the system checks (the lease is 30 s); --lease-seconds 120 contradicts it.
    worker = workers.start("--burst", lease_seconds=120, procedures={"IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 60})
    assert worker.wait(WAIT) == 1, worker.describe()
    assert ("CommandError: cannot start a worker: PROCEDURES['IDLE_IN_TRANSACTION_TIMEOUT_SECONDS'] (60s) must be "
            "longer than the lease (120s), or a step's open transaction is cut while its lease is valid "
            "(django_procedures.E005). Leave it unset (twice the lease) or raise it, or give a shorter "
            "--lease-seconds.") in worker.log(), worker.describe()
    assert "Traceback" not in worker.log(), worker.describe()
    # Nothing started: no worker row, and the procedure was never claimed.
    assert not Worker.objects.filter(worker_id=worker.worker_id).exists()
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.status, run.lease_owner) == (RunStatus.READY, "")
