"""Retrying a parent failed by its children retries those children and waits for them (issue 25, item 4)."""

import pytest

from django_procedures import get_handle
from django_procedures.exceptions import InvalidOperation
from django_procedures.models import KeyRequest, ProcedureRun, Step
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store.claim import claim
from django_procedures.testing import drain
from testproject.testapp.procedures import Leaf, Parent, PlainParent

pytestmark = pytest.mark.django_db


def row(pid) -> ProcedureRun:
    return ProcedureRun.objects.get(id=pid)


def children(pid) -> list[ProcedureRun]:
    return list(ProcedureRun.objects.filter(parent_id=pid).order_by("position"))


def run_one(cls):
    (c,) = claim("w", type_names=[cls.type_name], limit=1, lease_seconds=30)
    execute(RunningClaim(c))
    return c


def test_retrying_the_parent_retries_its_failed_child_and_resumes_after_its_suspension(tmp_path):
    fixed = tmp_path / "fixed"
    handle = PlainParent.submit({"fanout": 3, "failing": [1], "fail_until": str(fixed)})
    drain()
    assert row(handle.id).status == "failed"
    failed = ProcedureRun.objects.get(parent_id=handle.id, status="failed")
    steps_before = Step.objects.filter(procedure_id__in=[handle.id, failed.id]).count()

    fixed.touch()  # the operator fixes the cause, then retries the parent
    handle.retry(by="ops")
    parent, child = row(handle.id), row(failed.id)
    assert (parent.status, parent.pending_children, parent.retried_by, parent.manual_retries) == ("waiting", 1,
                                                                                                  "ops", 1)
    assert (child.status, child.retried_by, child.manual_retries, child.error) == ("ready", "ops", 1, "")
    assert child.retried_at == parent.retried_at is not None

    drain()
    parent = row(handle.id)
    assert (parent.status, parent.output) == ("done", ["done", "done", "done"])  # ctx.children sees the new outcome
    assert parent.step == 2 and parent.pending_children == 0
    assert Step.objects.filter(procedure_id__in=[handle.id, failed.id]).count() > steps_before  # history kept
    assert list(Step.objects.filter(procedure_id=failed.id).order_by("id").values_list("status", flat=True)) == [
        "failed", "done"]


def test_a_child_failed_by_its_own_children_is_retried_with_them(tmp_path):
    fixed = tmp_path / "fixed"
    handle = PlainParent.submit({"fanout": 1, "inner": {"fanout": 2, "failing": [0], "fail_until": str(fixed)}})
    drain()
    inner = ProcedureRun.objects.get(parent_id=handle.id, type_name=PlainParent.type_name)
    leaf = ProcedureRun.objects.get(parent_id=inner.id, status="failed")
    assert (row(handle.id).status, inner.status) == ("failed", "failed")

    fixed.touch()
    get_handle(handle.id).retry(by="ops")
    assert [(row(p).status, row(p).pending_children, row(p).retried_by) for p in (handle.id, inner.id, leaf.id)] == [
        ("waiting", 1, "ops"), ("waiting", 1, "ops"), ("ready", 0, "ops")]
    drain()
    assert row(inner.id).output == ["done", "done"]
    assert row(handle.id).output == ["done", "done"]


def test_siblings_cancelled_by_the_parents_failure_resume_with_it(tmp_path):
    fixed = tmp_path / "fixed"
    handle = PlainParent.submit({"fanout": 3, "failing": [0], "fail_until": str(fixed)})
    run_one(PlainParent)
    first = next(c for c in children(handle.id) if c.position == 0)
    # Run the failing leaf only: the parent wakes and fails, cancelling the two leaves that never started.
    ProcedureRun._writer.filter(parent_id=handle.id).exclude(id=first.id).update(run_at=first.run_at.replace(year=2999))
    run_one(Leaf)
    run_one(PlainParent)
    statuses = [(c.status, c.error) for c in children(handle.id)]
    assert statuses[0][0] == "failed"
    assert statuses[1:] == [("cancelled", f"cancelled: ancestor {handle.id} failed")] * 2

    fixed.touch()
    get_handle(handle.id).retry(by="ops")
    assert (row(handle.id).status, row(handle.id).pending_children) == ("waiting", 3)
    assert [(c.status, c.retried_by) for c in children(handle.id)] == [("ready", "ops")] * 3
    ProcedureRun._writer.filter(parent_id=handle.id).update(run_at=row(handle.id).run_at)
    drain()
    assert (row(handle.id).status, row(handle.id).output) == ("done", ["done", "done", "done"])


def test_a_child_whose_failure_is_not_worth_a_manual_retry_refuses_the_parents_retry():
    handle = PlainParent.submit({"fanout": 2, "failing": [1]})
    drain()
    failed = ProcedureRun.objects.get(parent_id=handle.id, status="failed")
    ProcedureRun._writer.filter(id=failed.id).update(failure_can_retry=False)
    with pytest.raises(InvalidOperation) as refused:
        get_handle(handle.id).retry(by="ops")
    assert str(refused.value) == (
        f"procedure {handle.id} cannot be retried: its child testapp.Leaf {failed.id} failed with an error marked "
        "not worth a manual retry (NonRetryable: leaf 1 refuses), and the parent would fail again at once on it; "
        "submit a new procedure instead")
    assert (row(handle.id).status, row(failed.id).status, row(handle.id).retried_by) == ("failed", "failed", "")


def test_a_child_cancelled_by_an_operator_refuses_the_parents_retry():
    handle = PlainParent.submit({"fanout": 2})
    run_one(PlainParent)
    first = children(handle.id)[0]
    get_handle(first.id).cancel(by="alice")
    drain()
    assert row(handle.id).status == "failed"
    with pytest.raises(InvalidOperation, match=f"its child testapp.Leaf {first.id} was cancelled \\(cancelled by "
                                               "alice\\), and a cancelled procedure is not retried"):
        get_handle(handle.id).retry()
    assert row(handle.id).status == "failed"


def test_a_parent_failed_in_its_own_step_is_retried_alone():
    handle = PlainParent.submit({"fanout": 2, "fail_report": True})
    drain()
    assert (row(handle.id).status, row(handle.id).failed_step) == ("failed", "report")
    get_handle(handle.id).retry(by="ops")
    assert (row(handle.id).status, row(handle.id).pending_children) == ("ready", 0)
    assert [(c.status, c.retried_by) for c in children(handle.id)] == [("done", "")] * 2


def test_a_rolled_back_parent_is_not_retried():
    handle = Parent.submit({"fanout": 2, "failing": [0]})
    drain()
    assert row(handle.id).status == "rolled_back"
    with pytest.raises(InvalidOperation, match="is rolled_back; only failed procedures can be retried"):
        get_handle(handle.id).retry()


def test_a_retried_parent_takes_its_lock_keys_again_when_it_resumes(tmp_path):
    fixed = tmp_path / "fixed"
    handle = PlainParent.submit({"fanout": 2, "failing": [0], "fail_until": str(fixed), "keys": [["k", "exclusive"]]})
    drain()
    assert row(handle.id).status == "failed" and not KeyRequest.objects.filter(procedure_id=handle.id).exists()
    fixed.touch()
    get_handle(handle.id).retry()
    assert (row(handle.id).status, row(handle.id).keys_held) == ("waiting", False)
    run_one(Leaf)
    (resumed,) = claim("w", type_names=[PlainParent.type_name], limit=1, lease_seconds=30)
    assert row(handle.id).keys_held and KeyRequest.objects.filter(procedure_id=handle.id, granted=True).exists()
    execute(RunningClaim(resumed))
    assert row(handle.id).status == "done" and not KeyRequest.objects.exists()
