"""A real ``procedures_worker`` prunes by itself: old finished trees (with steps and leases) go, the rest stays."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_procedures import clock
from django_procedures.models import Lease, ProcedureRun, Step
from testproject.testapp.procedures import ThreeSteps

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


def old_tree() -> ProcedureRun:
    at = clock.now() - timedelta(days=3)
    root = ProcedureRun._writer.create(type_name="x", status="done", run_at=at, finished_at=at)
    child = ProcedureRun._writer.create(type_name="x", status="failed", run_at=at, finished_at=at, parent=root,
                                        root=root)
    for run in (root, child):
        Step._writer.create(procedure=run, index=0, name="a", attempt=1, status="done", finished_at=at)
        Lease._writer.create(procedure=run, token=1, worker="w", claimed_at=at, released_at=at, outcome="completed")
    return root


@pytest.mark.parametrize(("retention", "kept"), [("2d", 0), (None, 2)])
def test_a_burst_worker_prunes_old_trees_unless_retention_is_off(workers, retention, kept):
    old_tree()
    fresh = ThreeSteps.submit({})
    worker = workers.start("--burst", procedures={"RETENTION": retention})
    assert worker.wait(60) == 0
    assert ProcedureRun.objects.get(id=fresh.id).status == "done"
    assert ProcedureRun.objects.exclude(id=fresh.id).count() == kept
    assert Step.objects.exclude(procedure_id=fresh.id).count() == kept
    assert Lease.objects.exclude(procedure_id=fresh.id).count() == kept


def test_a_worker_counts_the_minutes_that_finished_for_the_dashboard(workers):
    from django_procedures.models import FinishedCount, Rollup
    from django_procedures.store.activity import FINISHED, counted_span

    at = clock.now() - timedelta(minutes=10)
    begun = at.replace(second=0, microsecond=0)  # nine minutes behind: within CATCH_UP
    Rollup._writer.create(name=FINISHED, began=begun, until=begun)
    for status in ("done", "done", "failed"):
        ProcedureRun._writer.create(type_name="x", status=status, run_at=at, finished_at=at)
    worker = workers.start("--burst")
    assert worker.wait(60) == 0
    assert {c.status: c.count for c in FinishedCount.objects.filter(type_name="x")} == {"done": 2, "failed": 1}
    assert counted_span()[1] > at
