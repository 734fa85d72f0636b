"""Sub-procedures, child failures, rollback and cancellation, in-process."""

import pytest

from django_procedures import LockKey, Procedure, Status, get_handle, step
from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store.claim import claim
from django_procedures.testing import drain
from testproject.testapp.models import Effect
from testproject.testapp.procedures import Compensated, Parent, SuspendsLast, ThreeSteps, TolerantParent

pytestmark = pytest.mark.django_db


def test_a_parent_waits_for_its_children_and_reads_their_results():
    handle = Parent.submit({"fanout": 3})
    drain()
    assert handle.refresh().status == "done"
    assert handle.output == 0 + 2 + 4
    parent = ProcedureRun.objects.get(id=handle.id)
    children = ProcedureRun.objects.filter(parent_id=handle.id)
    assert children.count() == 3 and set(children.values_list("status", flat=True)) == {"done"}
    assert set(children.values_list("root_id", flat=True)) == {handle.id}
    assert set(children.values_list("depth", flat=True)) == {1}
    assert parent.state["seen"] == [["done", 0], ["done", 2], ["done", 4]]
    # The suspension was a checkpoint: spawn committed once, collect ran after.
    assert list(Step.objects.filter(procedure_id=handle.id).values_list("name", "status")) == [
        ("spawn", "done"), ("collect", "done")]
    assert list(Lease.objects.filter(procedure_id=handle.id).values_list("outcome", flat=True)) == [
        "completed", "completed"]


def test_a_waiting_parent_is_not_claimed_until_the_last_child_finishes():
    handle = Parent.submit({"fanout": 2})

    (parent,) = claim("w", type_names=[Parent.type_name], limit=1, lease_seconds=30)

    assert execute(RunningClaim(parent)) == "suspended"
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.status, run.pending_children) == ("waiting", 2)
    assert (handle.refresh().waiting_for, handle.wake_at) == ("children", None)
    assert claim("w", type_names=[Parent.type_name], limit=1, lease_seconds=30) == []
    drain()
    assert (handle.refresh().status, handle.waiting_for) == ("done", None)


def test_trees_of_any_depth_set_root_on_every_descendant():
    handle = Parent.submit({"depth": 3, "fanout": 3})
    drain()
    assert handle.refresh().status == "done"
    descendants = ProcedureRun.objects.filter(root_id=handle.id)
    assert descendants.count() == 3 + 9 + 27
    assert set(descendants.values_list("status", flat=True)) == {"done"}
    assert sorted(set(descendants.values_list("depth", flat=True))) == [1, 2, 3]


def test_a_suspension_in_the_last_step_finishes_the_parent_when_children_are_done():
    handle = SuspendsLast.submit()
    drain()
    assert handle.refresh().status == "done" and handle.output is None


def test_a_failed_child_fails_its_parent_and_cancels_its_unfinished_siblings():
    handle = Parent.submit({"fanout": 3, "failing": [0], "rollback_effect": True})

    (parent,) = claim("w", type_names=[Parent.type_name], limit=1, lease_seconds=30)
    execute(RunningClaim(parent))
    first_child = ProcedureRun.objects.get(parent_id=handle.id, position=0)
    ProcedureRun._writer.filter(parent_id=handle.id).exclude(id=first_child.id).update(run_at="2100-01-01T00:00Z")
    drain()  # runs the failing child; the parent wakes at once, its hook raises
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "rolled_back"  # Parent defines rollback
    assert f"child testapp.Leaf {first_child.id} ended failed" in run.error
    assert "leaf 0 refuses" in run.error
    siblings = ProcedureRun.objects.filter(parent_id=handle.id).exclude(id=first_child.id)
    assert set(siblings.values_list("status", flat=True)) == {"cancelled"}
    assert Effect.objects.filter(step="parent-rollback").count() == 1


def test_on_child_failed_that_returns_keeps_the_parent_waiting():
    handle = TolerantParent.submit({"fanout": 3, "failing": [1]})
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "done" and run.output == 0 + 4
    assert run.state["failed_children"] == ["NonRetryable: leaf 1 refuses"]
    assert sorted(s for s, _ in run.state["seen"]) == ["done", "done", "failed"]


def test_rollback_runs_after_a_permanent_failure_and_ends_rolled_back():
    handle = Compensated.submit()
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "rolled_back"
    assert run.error == "NonRetryable: the supplier said no" and run.failed_step == "confirm"
    assert list(Effect.objects.filter(procedure_id=handle.id).values_list("step", flat=True)) == ["book", "rollback"]
    assert list(Step.objects.filter(procedure_id=handle.id).values_list("name", "status")) == [
        ("book", "done"), ("confirm", "failed"), ("rollback", "done")]


def test_a_failing_rollback_is_retried_then_ends_failed_with_both_errors():
    handle = Compensated.submit({"rollback_fails": 5})
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed"
    assert run.error == "NonRetryable: the supplier said no"
    assert run.rollback_error == "RuntimeError: rollback attempt 2 failed"
    rollback_steps = list(Step.objects.filter(procedure_id=handle.id, name="rollback").values_list(
        "attempt", "status"))
    assert rollback_steps == [(1, "failed"), (2, "failed")]  # max_attempts=2
    # The rollback's writes rolled back with its failed transactions.
    assert not Effect.objects.filter(procedure_id=handle.id, step="rollback").exists()


def test_a_rollback_that_succeeds_on_retry():
    handle = Compensated.submit({"rollback_fails": 1})
    drain()
    assert handle.refresh().status == "rolled_back"
    assert Effect.objects.filter(procedure_id=handle.id, step="rollback").count() == 1


def test_cancel_cancels_the_whole_subtree_and_fences_running_members():
    handle = Parent.submit({"depth": 2, "fanout": 2})

    execute(RunningClaim(claim("w", type_names=[Parent.type_name], limit=1, lease_seconds=30)[0]))
    (child,) = claim("w", type_names=[Parent.type_name], limit=1, lease_seconds=30)
    result = handle.cancel(by="ops")
    assert result.changed and len(result.cancelled) == 3  # parent + 2 children (grandchildren not yet spawned)
    assert set(ProcedureRun.objects.values_list("status", flat=True)) == {"cancelled"}
    assert ProcedureRun.objects.get(id=handle.id).error == "cancelled by ops"
    assert Lease.objects.get(procedure_id=child.id).outcome == "lost"
    # The running child's worker is fenced out.
    assert execute(RunningClaim(child)) == "lost"
    assert ProcedureRun.objects.filter(parent_id=child.id).count() == 0


def test_cancelling_a_finished_procedure_changes_nothing_and_says_so():
    handle = ThreeSteps.submit()
    drain()
    result = handle.cancel()
    assert not result.changed and "is already done; nothing was cancelled" in result.message
    assert handle.refresh().status == "done"


def test_cancelling_a_child_counts_as_a_child_failure():
    handle = TolerantParent.submit({"fanout": 2})

    execute(RunningClaim(claim("w", type_names=[TolerantParent.type_name], limit=1, lease_seconds=30)[0]))
    child = ProcedureRun.objects.filter(parent_id=handle.id).first()
    get_handle(child.id).cancel()
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "done" and run.state["failed_children"] == ["cancelled"]


def test_children_take_their_own_queue_and_priority():
    from django_procedures import Procedure, Status, step
    from testproject.testapp.procedures import Leaf

    class Routes(Procedure):
        type_name = "tests.Routes"

        @step
        def spawn(self, ctx):
            return Status.suspended([Leaf({"n": 1}, queue="bulk", priority=7), Leaf({"n": 2})])

    handle = Routes.submit(queue="main")
    drain(queues=["main"])
    children = ProcedureRun.objects.filter(parent_id=handle.id).order_by("position")
    assert [(c.queue, c.priority) for c in children] == [("bulk", 7), ("default", 0)]
    assert handle.refresh().status == "waiting"
    drain()
    assert handle.refresh().status == "done"


def test_children_with_bad_state_fail_the_suspending_step_and_create_nothing():
    from django_procedures import Procedure, Status, step
    from testproject.testapp.procedures import Leaf

    class BadChildren(Procedure):
        type_name = "tests.BadChildren"

        @step
        def spawn(self, ctx):
            return Status.suspended([Leaf({"n": float("nan")})])

    handle = BadChildren.submit()
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed" and "children[0].state['n'] is nan" in run.error
    assert not ProcedureRun.objects.filter(parent_id=handle.id).exists()


def test_a_worker_lost_during_a_rollback_is_recovered_like_any_other():
    from datetime import timedelta

    from django.utils import timezone

    from django_procedures.policy.retry import FailDecision
    from django_procedures.store import failures
    from django_procedures.store.maintenance import maintain

    handle = Compensated.submit()
    (c,) = claim("w", type_names=[Compensated.type_name], limit=1, lease_seconds=30)
    failures.fail_attempt(c, None, "boom", "", FailDecision("boom", True), rollback=True)
    assert ProcedureRun.objects.get(id=handle.id).status == "rolling_back"
    ProcedureRun._writer.filter(id=handle.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert maintain().resumed == 1
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "rolled_back" and run.lost == 1
    assert list(Step.objects.filter(procedure_id=handle.id).values_list("name", "status")) == [
        ("rollback", "lost"), ("rollback", "done")]


class ForgivingLater(Parent):
    """A Parent without rollback whose hook raises (until a deploy makes it tolerant)."""

    type_name = "tests.ForgivingLater"
    rollback = Procedure.rollback
    tolerant = False

    def on_child_failed(self, ctx, child):
        if not self.tolerant:
            super().on_child_failed(ctx, child)


def test_a_retried_parent_whose_hook_now_returns_is_not_left_waiting(monkeypatch):
    handle = ForgivingLater.submit({"fanout": 3, "failing": [0]})
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed" and run.pending_children == 0
    monkeypatch.setattr(ForgivingLater, "tolerant", True)
    handle.retry(by="ops")
    drain()
    assert handle.refresh().status == "done"


def test_a_child_whose_lock_keys_raise_fails_the_suspending_step():
    class BadKeys(Procedure):
        type_name = "tests.BadKeys"

        def lock_keys(self):
            return [LockKey.exclusive(self.state["missing"])]

        @step
        def go(self, ctx):
            pass

    class SpawnsBadKeys(Procedure):
        type_name = "tests.SpawnsBadKeys"

        @step
        def spawn(self, ctx):
            return Status.suspended([BadKeys({})])

    handle = SpawnsBadKeys.submit()
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed" and "cannot submit the children: KeyError" in run.error


def test_a_worker_lost_too_often_during_the_rollback_keeps_both_errors():
    handle = Compensated.submit()
    (c,) = claim("w", type_names=[Compensated.type_name], limit=1, lease_seconds=30)
    from django_procedures.policy.retry import FailDecision
    from django_procedures.store import failures, transitions

    failures.fail_attempt(c, None, "NonRetryable: the supplier said no", "", FailDecision("x", True), rollback=True)
    transitions.give_back(c)
    ProcedureRun._writer.filter(id=handle.id).update(lost=Compensated.retry.max_lost)
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed"
    assert run.error == "NonRetryable: the supplier said no"
    assert run.rollback_error.startswith("worker lost 10 times during the rollback")


def test_long_lock_key_names_are_refused_at_submit():
    from testproject.testapp.procedures import KeyHolder

    with pytest.raises(TypeError, match="at most 255 characters"):
        KeyHolder.submit({"keys": [["k" * 300, "exclusive"]]})


@pytest.mark.postgres
def test_a_parent_not_woken_for_a_lost_connection_is_logged_without_a_traceback(monkeypatch, caplog):
    """A lost connection is an outage the worker reports where it notices it; another error keeps its traceback."""
    import logging
    import uuid as uuid_module

    from django.db import OperationalError

    from django_procedures.store import tree

    def gone(parent_id, suspension):
        raise OperationalError("consuming input failed: server closed the connection unexpectedly")

    def broken(parent_id, suspension):
        raise ValueError("a bug")

    with caplog.at_level(logging.WARNING, logger="django_procedures"):
        monkeypatch.setattr(tree, "wake_parent", gone)
        tree._wake_after_commit(uuid_module.uuid4(), 1)
        monkeypatch.setattr(tree, "wake_parent", broken)
        tree._wake_after_commit(uuid_module.uuid4(), 1)
    lost, bug = [r for r in caplog.records if "could not wake parent" in r.getMessage()]
    assert not lost.exc_info and "server closed the connection" in lost.getMessage()
    assert bug.exc_info
