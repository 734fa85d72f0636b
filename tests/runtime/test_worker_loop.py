"""The worker's main loop, in-process: upkeep never starves claiming."""

import itertools
import time

import pytest

from django_procedures.models import ProcedureRun
from django_procedures.runtime import worker as worker_module
from django_procedures.runtime.worker import Worker, WorkerOptions
from testproject.testapp.procedures import ThreeSteps

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_a_sweep_slower_than_its_interval_is_not_run_again_before_the_next_claim(monkeypatch, settings):
    """Found by the soak: the next sweep was due from the start of a slow one, so it ran between every claim."""
    settings.PROCEDURES = {"SWEEP_SECONDS": 0.2, "BURST_WAIT_SECONDS": 0, "LISTEN_NOTIFY": False}
    real, sweeps = worker_module.maintain, []

    def slow_maintain():
        started = time.monotonic()
        time.sleep(0.4)
        report = real()
        sweeps.append((started, time.monotonic()))
        return report

    monkeypatch.setattr(worker_module, "maintain", slow_maintain)
    ThreeSteps.submit_many([{"sleep": {"one": 0.1}} for _ in range(15)])  # 1.5 s of work at least
    Worker(WorkerOptions(concurrency=1, burst=True, lease_seconds=10, shutdown_timeout=5)).run()

    assert set(ProcedureRun.objects.values_list("status", flat=True)) == {"done"}
    gaps = [later[0] - earlier[1] for earlier, later in itertools.pairwise(sweeps)]
    assert len(gaps) >= 2 and min(gaps) >= 0.19, gaps
