"""Retrying a failed child while its parent waits, with real worker processes on PostgreSQL.

A tolerant parent's ``on_child_failed`` handled the failure and the parent went
back to waiting for a sibling that is still running. Retrying the failed child
counts it as pending again: the parent goes on only when both have finished.
(Before, the retried child was counted off a second time when it finished, and
the parent ran its next step while the sibling was still running.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from django_procedures import get_handle
from django_procedures.models import ProcedureRun, Step
from testproject.testapp.procedures import PlainParent, Spawner
from tests.runs import open_leases
from tests.runtime.processes import read_pid, wait_for
from tests.runtime.trees import effects, no_step_committed_twice, no_tracebacks, start

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


def row(pid) -> ProcedureRun:
    return ProcedureRun.objects.get(id=pid)


def test_retrying_a_handled_child_while_its_parent_waits_makes_the_parent_wait_for_it_again(workers, tmp_path):
    fixed, flag, marker = tmp_path / "fixed", tmp_path / "flag", tmp_path / "sibling"
    handle = Spawner.submit({"tolerant": True, "children": [
        {"state": {"n": 1, "fail_until": str(fixed)}},
        {"state": {"n": 2, "flag": str(flag), "marker": str(marker)}, "gated": True},
    ]})
    pool = start(workers)
    wait_for(lambda: ProcedureRun.objects.filter(parent_id=handle.id, position=0, status="failed",
                                                 failure_handled=True).exists()
             and row(handle.id).status == "waiting" and read_pid(marker),
             timeout=60, workers=workers,
             what="the first child failed and handled, the parent waiting again, the sibling in its step")
    failed = ProcedureRun.objects.get(parent_id=handle.id, position=0)
    sibling = ProcedureRun.objects.get(parent_id=handle.id, position=1)
    assert row(handle.id).pending_children == 1

    fixed.touch()
    get_handle(failed.id).retry(by="test")
    assert row(handle.id).pending_children == 2  # counted as pending again, in the retry's transaction
    wait_for(lambda: row(failed.id).status == "done", timeout=60, workers=workers,
             what="the retried child to finish")
    parent = row(handle.id)
    # The sibling is still inside its step: the parent keeps waiting for it (a child ending done does not
    # count itself off; the last one wakes the parent).
    assert parent.status == "waiting", parent.status
    assert row(sibling.id).status == "running"
    assert effects(handle.id, "collect") == 0

    flag.touch()
    wait_for(lambda: row(handle.id).status == "done", timeout=60, workers=workers, what="the parent to finish")
    parent = row(handle.id)
    assert (parent.output, parent.pending_children) == (2 + 4, 0)
    assert parent.state["seen"] == [["done", 2], ["done", 4]]
    assert parent.state["failed_children"] == ["NonRetryable: leaf 1 refuses"]  # reported once, before the retry
    assert effects(handle.id, "collect") == 1
    no_step_committed_twice()
    assert open_leases() == 0
    no_tracebacks(pool)


def test_a_retried_child_that_fails_again_is_reported_to_its_parent_again(workers, tmp_path):
    flag, marker = tmp_path / "flag", tmp_path / "sibling"
    never = tmp_path / "never"
    handle = Spawner.submit({"tolerant": True, "children": [
        {"state": {"n": 1, "fail_until": str(never)}},
        {"state": {"n": 2, "flag": str(flag), "marker": str(marker)}, "gated": True},
    ]})
    pool = start(workers)
    first = wait_for(lambda: ProcedureRun.objects.filter(parent_id=handle.id, position=0, status="failed",
                                                         failure_handled=True).first()
                     if row(handle.id).status == "waiting" and read_pid(marker) else None,
                     timeout=60, workers=workers, what="the first child failed and handled, the parent waiting")
    get_handle(first.id).retry(by="test")
    wait_for(lambda: len(row(handle.id).state.get("failed_children", [])) == 2 and row(handle.id).status == "waiting",
             timeout=60, workers=workers, what="the second failure reported to the parent, which waits again")
    assert row(handle.id).pending_children == 1
    flag.touch()
    wait_for(lambda: row(handle.id).status == "done", timeout=60, workers=workers, what="the parent to finish")
    assert row(handle.id).state["seen"] == [["failed", None], ["done", 4]]
    assert Path(marker).exists()
    no_tracebacks(pool)


def test_retrying_a_parent_its_child_failed_for_good_reruns_the_child_and_the_parent_ends_done(workers, tmp_path):
    """Issue 25, item 4: a fan-out of three whose middle child failed for good; the operator fixes the cause and
    retries the parent. The child runs again, the parent resumes after its suspension and ends ``done``."""
    fixed = tmp_path / "fixed"
    handle = PlainParent.submit({"fanout": 3, "failing": [1], "fail_until": str(fixed)})
    pool = start(workers)
    wait_for(lambda: row(handle.id).status == "failed", timeout=60, workers=workers,
             what="the parent failed by its child")
    child = ProcedureRun.objects.get(parent_id=handle.id, position=1)
    assert child.status == "failed" and row(handle.id).error.startswith("ChildFailed: child testapp.Leaf")
    # Its siblings finished or were cancelled by the parent's failure (on a loaded machine, before they ran).
    assert {c.status for c in ProcedureRun.objects.filter(parent_id=handle.id).exclude(id=child.id)} <= {
        "done", "cancelled"}

    fixed.touch()  # the operator fixes the cause
    get_handle(handle.id).retry(by="ops")
    wait_for(lambda: row(handle.id).status == "done", timeout=60, workers=workers, what="the parent to finish")
    parent = row(handle.id)
    assert (parent.output, parent.pending_children, parent.retried_by) == (["done", "done", "done"], 0, "ops")
    assert (row(child.id).retried_by, row(child.id).manual_retries) == ("ops", 1)
    assert list(Step.objects.filter(procedure_id=child.id).order_by("id").values_list("status", flat=True)) == [
        "failed", "done"]
    assert list(Step.objects.filter(procedure_id=handle.id).values_list("name", "status")) == [
        ("spawn", "done"), ("report", "done")]  # the spawn step ran once: the parent resumed after its suspension
    no_step_committed_twice()
    assert open_leases() == 0
    no_tracebacks(pool)
