"""Lock keys with real ``manage.py procedures_worker`` processes on PostgreSQL.

Exclusive holders of one key never overlap, shared ones do, unrelated work
goes on while a key is busy, and a holder killed mid-step keeps its key until
it finishes on another worker.

Conventions and helpers: ``tests/runtime/trees.py``.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest

from django_procedures.models import KeyRequest, Lease, ProcedureRun
from testproject.testapp.procedures import KeyHolder, Leaf, ThreeSteps
from tests.runs import lease_outcomes, open_leases, status_of, steps
from tests.runtime.processes import read_pid, wait_for
from tests.runtime.trees import (
    WAIT,
    S,
    X,
    effects,
    kill,
    lease_interval,
    no_tracebacks,
    overlap,
    start,
    start_survivors,
    start_victim,
    step_interval,
    wait_all,
    worker_with_pid,
)

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


def test_three_exclusive_holders_of_one_key_never_overlap(workers):
    ids = [KeyHolder.submit({"keys": X, "hold": 1}).id for _ in range(3)]
    # Requests are queued by the clock of the claim that made them: two workers claiming at once need not
    # ask in submission order. One worker asks for all three first (its claims are in claim order), then a
    # second one joins in.
    pool = start(workers, 1)

    def asked(i) -> bool:
        return KeyRequest.objects.filter(procedure_id=i).exists() or status_of(i) == "done"

    wait_for(lambda: all(asked(i) for i in ids), timeout=WAIT, workers=workers,
             what="the first worker to queue all three holders for the key")
    pool += start(workers, 1)
    wait_all(ids, {"done"}, timeout=WAIT, workers=workers, what="three exclusive holders to finish")

    holds = sorted((*step_interval(i, "hold"), i) for i in ids)
    for earlier, later in pairwise(holds):
        assert later[0] >= earlier[1], holds
    assert [i for _, _, i in holds] == ids  # the oldest waiter got the key first
    # From the claim that took the key to the final transaction that released it (database clock).
    held = sorted(lease_interval(i) for i in ids)
    for earlier, later in pairwise(held):
        assert later[0] >= earlier[1], held
    assert all(effects(i, "hold") == 1 for i in ids)
    assert all(lease_outcomes(i) == ["completed"] for i in ids)
    assert open_leases() == 0 and not KeyRequest.objects.exists()
    no_tracebacks(pool)


def test_shared_holders_of_one_key_overlap(workers, tmp_path):
    flag = tmp_path / "flag"
    ids = [KeyHolder.submit({"keys": S, "flag": str(flag)}).id for _ in range(3)]
    pool = start(workers)
    # They hold until the flag exists: all three must be able to hold the key at once (4 threads).
    wait_for(lambda: ProcedureRun.objects.filter(id__in=ids, status="running", keys_held=True).count() == 3,
             timeout=WAIT, workers=workers, what="all three shared holders to hold the key at once")
    flag.touch()
    wait_all(ids, {"done"}, timeout=WAIT, workers=workers, what="three shared holders to finish")

    holds = [step_interval(i, "hold") for i in ids]
    overlapping = [(a, b) for n, a in enumerate(holds) for b in holds[n + 1:] if overlap(a, b)]
    assert overlapping, holds
    assert open_leases() == 0 and not KeyRequest.objects.exists()
    no_tracebacks(pool)


def test_unrelated_work_finishes_while_a_key_is_busy_and_the_next_holder_waits(workers, tmp_path):
    flag = tmp_path / "flag"
    first = KeyHolder.submit({"keys": X, "flag": str(flag)})
    pool = start(workers)
    wait_for(lambda: ProcedureRun.objects.filter(id=first.id, status="running", keys_held=True).exists(),
             timeout=WAIT, workers=workers, what="the first holder to take the key and run")

    second = KeyHolder.submit({"keys": X})
    unrelated = [h.id for h in ThreeSteps.submit_many([{} for _ in range(20)])]
    wait_all(unrelated, {"done"}, timeout=WAIT, workers=workers, what="20 unrelated procedures to finish")

    # The order: all the unrelated work is done while the holder still runs and the second one waits.
    assert status_of(first.id) == "running"
    waiter = ProcedureRun.objects.get(id=second.id)
    assert (waiter.status, waiter.waiting_for_keys, waiter.keys_held, waiter.failures) == ("ready", True, False, 0)
    assert steps(second.id) == [] and lease_outcomes(second.id) == []
    assert not Lease.objects.filter(procedure_id__in=unrelated, released_at__isnull=True).exists()

    flag.touch()
    wait_all([first.id, second.id], {"done"}, timeout=WAIT, workers=workers, what="both holders to finish")
    # The second holder started only after the first had finished.
    assert step_interval(second.id, "hold")[0] >= step_interval(first.id, "hold")[1]
    assert lease_interval(second.id)[0] >= lease_interval(first.id)[1]
    assert open_leases() == 0 and not KeyRequest.objects.exists()
    no_tracebacks(pool)


def test_a_holder_killed_mid_step_keeps_its_key_until_it_finishes_elsewhere(workers, tmp_path):
    marker, flag = tmp_path / "holder", tmp_path / "flag"
    holder = Leaf.submit({"n": 1, "keys": X, "marker": str(marker), "until": {"work": str(flag)}})
    start_victim(workers)
    victim = worker_with_pid(workers, wait_for(lambda: read_pid(Path(f"{marker}.work")), timeout=WAIT,
                                               workers=workers, what="the holder to be in its step"))
    waiter = KeyHolder.submit({"keys": X})
    kill(victim)
    flag.touch()  # (the killed attempt never sees it; the next one goes straight through)
    survivors = start_survivors(workers)
    wait_all([holder.id, waiter.id], {"done"}, timeout=WAIT, workers=workers, what="the holder and the waiter")

    assert steps(holder.id) == [(0, "work", 1, "lost"), (0, "work", 2, "done")]
    assert lease_outcomes(holder.id) == ["expired", "completed"]
    assert effects(holder.id) == 1
    # The key outlived the lost lease: the waiter was granted it only after the holder's final transaction.
    (holder_end,) = Lease.objects.filter(procedure_id=holder.id, outcome="completed").values_list(
        "released_at", flat=True)
    assert lease_interval(waiter.id)[0] >= holder_end
    assert step_interval(waiter.id, "hold")[0] >= step_interval(holder.id, "work")[1]
    assert open_leases() == 0 and not KeyRequest.objects.exists()
    no_tracebacks(survivors)
