"""Flow-control limits with real ``manage.py procedures_worker`` processes on PostgreSQL.

A concurrency limit holds across 8 worker processes claiming at once, counted from rows the steps write (not
from timing); a worker killed with SIGKILL keeps its slot only until the sweep takes its lease back.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_procedures.models import Lease, LimitSlot
from testproject.testapp.models import Effect
from testproject.testapp.procedures import Limited, ThreeSteps
from tests.runs import status_of
from tests.runtime.processes import wait_for
from tests.runtime.trees import WAIT, effects, kill, no_tracebacks, start, start_survivors, start_victim, wait_all

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


def in_use(name: str) -> int:
    """Slots of ``name`` taken (leases holding one now)."""
    return LimitSlot.objects.in_use(name)


def most_at_once(ids) -> int:
    """The most steps between their ``enter`` and ``exit`` rows at once, in the order the rows were numbered.

    A step writes ``enter`` after its claim committed and ``exit`` before its lease ends, each in its own
    transaction; ids are drawn from one sequence as the rows are written. Two steps whose id intervals overlap
    ran at the same moment, so this is at most the number of leases holding the limit at once.
    """
    rows = Effect.objects.filter(procedure_id__in=list(ids), step__in=["enter", "exit"]).order_by("id")
    running = most = 0
    for step in rows.values_list("step", flat=True):
        running += 1 if step == "enter" else -1
        most = max(most, running)
    return most


def test_a_concurrency_limit_is_exact_across_eight_worker_processes(workers):
    ids = [Limited.submit({"concurrency": [["crm", 3]], "hold": 0.05}).id for _ in range(48)]
    unlimited = [ThreeSteps.submit().id for _ in range(8)]
    pool = start(workers, 8, threads=3)
    wait_all(ids + unlimited, {"done"}, timeout=WAIT * 2, workers=workers, what="every procedure to finish")
    assert 1 <= most_at_once(ids) <= 3
    assert all(effects(i, "enter") == 1 for i in ids)
    assert in_use("crm") == 0
    no_tracebacks(pool)


def test_a_killed_workers_slot_comes_back_with_the_sweep(workers, tmp_path):
    flag = tmp_path / "flag"
    first = Limited.submit({"concurrency": [["crm", 1]], "flag": str(flag)}).id
    second = Limited.submit({"concurrency": [["crm", 1]]}).id
    (victim,) = start_victim(workers)
    wait_for(lambda: in_use("crm") == 1, timeout=WAIT, workers=workers, what="the first to take the slot")
    assert status_of(first) == "running" and status_of(second) == "ready"
    kill(victim)
    flag.write_text("go")
    start_survivors(workers)
    wait_all([first, second], {"done"}, timeout=WAIT, workers=workers, what="both to finish after the sweep")
    assert Lease.objects.get(procedure_id=first, token=1).outcome == "expired"
    assert in_use("crm") == 0


def test_a_rate_limit_holds_across_workers(workers):
    ids = [Limited.submit({"rate": [["api", 4, 1.0]]}).id for _ in range(12)]
    start(workers, 3, threads=2)
    wait_all(ids, {"done"}, timeout=WAIT, workers=workers, what="every rate-limited procedure to finish")
    claimed = sorted(Lease.objects.filter(procedure_id__in=ids).values_list("claimed_at", flat=True))
    assert len(claimed) == len(ids)
    # At most 4 claims in any second. The window is taken a little short: the rate counts the claiming
    # worker's clock, the lease row the database's a moment later.
    window = timedelta(seconds=0.9)
    assert max(sum(1 for t in claimed if s <= t < s + window) for s in claimed) <= 4
    assert claimed[-1] - claimed[0] >= timedelta(seconds=1.8)  # 12 claims at 4 a second span two seconds at least
