"""A worker frozen inside one of its own transactions (not a step's) must not hold rows for long.

``IDLE_IN_TRANSACTION_TIMEOUT_SECONDS`` may be raised far past the lease so
that slow atomic steps are not cut; the worker's own short transactions (the
lease sweep, claims, maintenance) are cut after twice its lease whatever it
says. Found by the SIGSTOP test with a long timeout on a busy machine: the frozen
worker's main thread held the procedure it was sweeping, and no other worker's
sweep, which skips locked rows, could take it back until that timeout.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from django.db import transaction

from django_procedures.models import Lease
from testproject.testapp.procedures import ThreeSteps
from tests.runtime.processes import direct_only, session_state, wait_for, waits_for_a_lock, worker_sessions
from tests.runtime.test_worker_processes import FAST, LEASE, SHORT_LEASE, WAIT, leases, stop, wait_marker, wait_status

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


@direct_only("the test follows the sweeping worker's own backend, and behind PgBouncer its statements may run on "
             "any server connection")
def test_a_worker_frozen_in_its_lease_sweep_holds_the_row_for_twice_its_lease_only(workers, tmp_path):
    marker, flag = tmp_path / "m", tmp_path / "flag"
    handle = ThreeSteps.submit({"marker": str(marker), "until": {"two": str(flag)}})
    lost = workers.start(lease_seconds=SHORT_LEASE, procedures=FAST)
    wait_marker(Path(f"{marker}.two"), lost.pid, timeout=WAIT, workers=workers)
    lost.kill_now()  # its lease expires within SHORT_LEASE seconds

    with transaction.atomic():
        # The open lease held: the sweep takes the run's row, then waits to close the lease as expired.
        list(Lease.objects.select_for_update().filter(procedure_id=handle.id, released_at__isnull=True))
        # A step may idle ten minutes in its transaction; the sweeper's own transactions may not.
        sweeper = workers.start(lease_seconds=SHORT_LEASE,
                                procedures={**FAST, "IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 600})
        (main,) = wait_for(lambda: worker_sessions(sweeper, "main"), timeout=WAIT, workers=workers,
                           what="the sweeping worker's main connection")
        wait_for(lambda: waits_for_a_lock(main), timeout=WAIT, workers=workers,
                 what="the sweep to wait for the lease row")
        sweeper.signal(signal.SIGSTOP)
    # The sweep's statement ran once the lease was free; its transaction now waits for a COMMIT that never comes.
    wait_for(lambda: session_state(main) in ("idle in transaction", ""), timeout=WAIT, workers=workers,
             what="the frozen sweep's statement to end")

    flag.touch()
    resumer = workers.start(lease_seconds=LEASE, procedures=FAST)
    # Cut after 2 x SHORT_LEASE, the frozen sweep releases the row and the other worker's sweep takes it.
    wait_status(handle.id, "done", timeout=WAIT, workers=workers)
    assert session_state(main) == "", "PostgreSQL must have ended the frozen sweep's session"
    assert leases(handle.id) == [(lost.worker_id, "expired", True), (resumer.worker_id, "completed", True)]
    assert stop(resumer) == 0
