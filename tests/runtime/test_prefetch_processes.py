"""Claiming ahead of the threads, with real workers: short procedures are claimed in batches, and a
stopping worker gives back the ones it had not started."""

from __future__ import annotations

import signal
import time

import pytest
from django.db.models import Count

from django_procedures.models import Lease, ProcedureRun, Step
from testproject.testapp.procedures import Counter, ThreeSteps
from tests.runtime.processes import wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

#: Seconds to wait for anything that is only a matter of time (a loaded machine may be slow).
WAIT = 120


def held_by(worker) -> int:
    return ProcedureRun.objects.filter(status="running", lease_owner=worker.worker_id).count()


def test_a_worker_holds_short_procedures_beyond_its_threads_and_gives_back_the_unstarted_on_sigterm(workers):
    n = 3000
    ThreeSteps.submit_many([{} for _ in range(n)])
    w = workers.start("--concurrency", "2", lease_seconds=600)  # far past the test: nothing is left to expire
    wait_for(lambda: held_by(w) > 2, timeout=WAIT, workers=workers, interval=0.01,
             what="the worker to hold more procedures than its 2 threads")

    w.signal(signal.SIGTERM)
    assert w.wait(WAIT) == 0

    statuses = dict(ProcedureRun.objects.values_list("status").annotate(n=Count("id")))
    assert set(statuses) <= {"done", "ready"} and statuses.get("ready", 0) > 0, statuses
    assert not Lease.objects.filter(released_at__isnull=True).exists()
    outcomes = dict(Lease.objects.values_list("outcome").annotate(n=Count("id")))
    assert outcomes.get("released", 0) >= 1, outcomes  # the prefetched ones went back at once
    per_step = Step.objects.values("procedure_id", "index").annotate(n=Count("id"))
    assert not per_step.filter(n__gt=1).exists()  # nothing committed twice

    b = workers.start("--burst", "--concurrency", "4", lease_seconds=600)
    assert b.wait(5 * WAIT) == 0
    assert dict(ProcedureRun.objects.values_list("status").annotate(n=Count("id"))) == {"done": n}
    assert Step.objects.count() == 3 * n


def test_prefetch_zero_claims_only_for_idle_threads(workers):
    ThreeSteps.submit_many([{} for _ in range(400)])
    w = workers.start("--burst", "--concurrency", "2", lease_seconds=600, procedures={"PREFETCH": 0})
    most = 0
    while w.alive():
        most = max(most, held_by(w))
        time.sleep(0.005)
    assert w.wait(5) == 0
    assert ProcedureRun.objects.filter(status="done").count() == 400
    assert 1 <= most <= 2


def test_what_a_worker_claimed_ahead_but_cannot_start_is_given_back_to_an_idle_worker(workers, tmp_path):
    """The pace changed under a prefetch: the claimed-ahead procedures turn out long. The ones still
    waiting for a thread after GIVE_BACK_SECONDS go back, and the idle worker takes them."""
    from testproject.testapp.procedures import KeyHolder

    pool = [workers.start("--concurrency", "1", lease_seconds=600) for _ in range(2)]
    # Short ones (one step, one transaction): both workers learn a fast pace, even on a busy machine.
    Counter.submit_many([{"target": 1} for _ in range(40)])
    wait_for(lambda: ProcedureRun.objects.filter(status="done").count() == 40, timeout=WAIT, workers=workers,
             what="the short procedures to finish")

    flag = tmp_path / "flag"
    holders = [h.id for h in KeyHolder.submit_many([{"flag": str(flag)} for _ in range(3)])]

    def one_on_each_worker() -> bool:
        owners = ProcedureRun.objects.filter(id__in=holders, status="running").values_list("lease_owner", flat=True)
        return sorted(owners) == sorted(w.worker_id for w in pool)

    def third_given_back() -> bool:
        # Whatever was claimed ahead went back after GIVE_BACK_SECONDS (a released lease), and the third
        # waits, ready, for the next free thread (neither worker claims it again while its thread is busy).
        return (one_on_each_worker()
                and ProcedureRun.objects.filter(id__in=holders, status="ready").count() == 1
                and Lease.objects.filter(procedure_id__in=holders, outcome="released").exists())

    wait_for(third_given_back, timeout=WAIT, workers=workers,
             what="one long procedure on each worker's thread, the third given back and ready")

    flag.touch()
    wait_for(lambda: ProcedureRun.objects.filter(id__in=holders, status="done").count() == 3, timeout=WAIT,
             workers=workers, what="the long procedures to finish")
    for w in pool:
        w.signal(signal.SIGTERM)
        assert w.wait(WAIT) == 0
    # The stats line each worker logs at exit (docs/running-workers.md) counts what it gave back.
    assert sum(w.final_count("given_back") for w in pool) >= 1
