"""An atomic step that leaves its transaction idle past ``IDLE_IN_TRANSACTION_TIMEOUT_SECONDS``, on real workers.

PostgreSQL ends such a session (SQLSTATE 25P03). The step held its
transaction too long: a failed attempt of that step, counted against
``max_attempts`` and explained, not a lost connection resumed (and lost)
over and over until the procedure is "poisonous".
"""

from __future__ import annotations

import signal

import pytest

from django_procedures.models import Lease, ProcedureRun, Step
from testproject.testapp.long_steps import IdlesInTransaction
from testproject.testapp.models import Effect
from testproject.testapp.procedures import ThreeSteps
from tests.runtime.processes import direct_only, wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

#: The idle timeout must outlast the lease (check E005); the step idles well past it.
LEASE, IDLE_TIMEOUT, SLEEP = 2.0, 3.0, 5.0
WAIT = 120


def final(pid) -> bool:
    return ProcedureRun.objects.filter(id=pid, status__in=("done", "failed")).exists()


@direct_only("PgBouncer reports a server connection cut by PostgreSQL in words of its own")
@pytest.mark.parametrize("then", ["query", "return"], ids=["step-meets-the-cut", "checkpoint-meets-the-cut"])
def test_a_step_idle_past_the_timeout_is_a_failed_attempt_that_says_why(workers, then):
    handle = IdlesInTransaction.submit({"sleep": SLEEP, "then": then})
    w = workers.start(lease_seconds=LEASE, procedures={"SWEEP_SECONDS": 0.5, "LEASE_SECONDS": LEASE,
                                                       "IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": IDLE_TIMEOUT})
    wait_for(lambda: final(handle.id) or ProcedureRun.objects.filter(id=handle.id, lost__gt=0).exists(),
             timeout=WAIT, workers=workers, what="the idle step's procedure to end (or be counted lost)")

    row = ProcedureRun.objects.get(id=handle.id)
    assert (row.status, row.lost) == ("failed", 0), (row.status, row.lost, row.error, workers.describe())
    assert "poisonous" not in row.error
    for text in ("IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", f"{IDLE_TIMEOUT:g}s", "@step(atomic=False)"):
        assert text in row.error, row.error
    # Each attempt failed (RetryPolicy(max_attempts=2)), with the same explanation; none is "lost".
    rows = list(Step.objects.filter(procedure_id=handle.id).order_by("attempt").values_list("attempt", "status",
                                                                                           "error"))
    assert [(a, s) for a, s, _ in rows] == [(1, "failed"), (2, "failed")], rows
    assert all("IDLE_IN_TRANSACTION_TIMEOUT_SECONDS" in e for _, _, e in rows), rows
    assert list(Lease.objects.filter(procedure_id=handle.id).order_by("token").values_list("outcome", flat=True)) \
        == ["retried", "failed"]
    assert not Effect.objects.filter(procedure_id=handle.id).exists()  # both transactions were rolled back

    # PostgreSQL closed the executor's session: the same worker reconnects and carries on.
    after = ThreeSteps.submit({})
    wait_for(lambda: final(after.id), timeout=WAIT, workers=workers, what="a procedure after the cut")
    assert ProcedureRun.objects.get(id=after.id).status == "done"
    assert w.alive(), w.describe()
    w.signal(signal.SIGTERM)
    assert w.wait(30) == 0
