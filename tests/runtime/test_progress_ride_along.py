"""A held-back ``ctx.progress()`` report rides along with the write that commits the steps (checkpoint,
suspension, completion): no statement of its own, visible once that write commits, fenced with it."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from django.db import connection

from django_procedures import Procedure, Status, step
from django_procedures.exceptions import LeaseLost
from django_procedures.models import ProcedureRun
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store import operations, transitions
from django_procedures.store.claim import claim
from django_procedures.store.fence import StepRecord
from testproject.testapp.procedures import Leaf
from tests.store.test_sibling_completion import Statements

pytestmark = pytest.mark.django_db

T = datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)


class TwoSteps(Procedure):
    """Reports ``n`` times in each step (the first seems to take ``takes`` seconds); its output is the progress
    its second step found stored."""

    type_name = "test.ProgressTwoSteps"

    @step
    def first(self, ctx):
        for i in range(self.state["n"]):
            ctx.progress(i + 1, 2 * self.state["n"], "first")
        OFFSET[0] += self.state.get("takes", 0.0)  # seconds this step seems to take (see OFFSET)

    @step
    def second(self, ctx):
        found = ProcedureRun.objects.values_list("progress", flat=True).get(id=ctx.procedure_id)
        for i in range(self.state["n"]):
            ctx.progress(self.state["n"] + i + 1, 2 * self.state["n"], "second")
        return Status.done(output=found)


#: Seconds added to ``time.monotonic()`` (SlowSteps moves it on, so that its steps seem to take 2 s each).
OFFSET = [0.0]


class SlowSteps(Procedure):
    type_name = "test.ProgressSlowSteps"

    @step
    def first(self, ctx):
        if self.state["report"]:
            ctx.progress(1, 2, "first")
        OFFSET[0] += 2.0

    @step
    def second(self, ctx):
        if self.state["report"]:
            ctx.progress(2, 2, "second")
        OFFSET[0] += 2.0


class Suspends(Procedure):
    type_name = "test.ProgressSuspends"

    @step
    def spawn(self, ctx):
        ctx.progress(1, 2, "spawned")
        return Status.suspended([Leaf({"n": 0})])

    @step
    def after(self, ctx):
        pass


def run_one(cls, state, statements=None):
    """Submit and run one ``cls`` to its end on this connection; (its id, the statements the run sent)."""
    handle = cls.submit(state)
    (c,) = claim("t", type_names=[cls.type_name], limit=1, lease_seconds=30)
    before = len(statements.sent) if statements else 0
    if statements:
        with connection.execute_wrapper(statements):
            execute(RunningClaim(c))
    else:
        execute(RunningClaim(c))
    return handle, (len(statements.sent) - before if statements else 0)


def test_reports_cost_no_statement_of_their_own(monkeypatch):
    statements = Statements(monkeypatch)
    quiet, without = run_one(TwoSteps, {"n": 0}, statements)
    loud, with_reports = run_one(TwoSteps, {"n": 50}, statements)
    # 100 reports within the claim's first second: each step's latest rides along with its checkpoint or
    # the completion. Before, the completion's transaction sent one more UPDATE of its own.
    assert with_reports == without
    assert not [sql for sql in statements.sent if sql.startswith("UPDATE") and "progress" in sql
                and "step_name" not in sql]
    assert quiet.refresh().progress is None
    assert loud.refresh().status == "done"
    assert (loud.progress["done"], loud.progress["total"], loud.progress["note"]) == (100, 100, "second")


def test_a_report_held_back_when_a_step_ends_past_the_interval_still_rides_along(monkeypatch):
    from django_procedures.runtime import progress

    real = time.monotonic
    monkeypatch.setattr(progress.time, "monotonic", lambda: real() + OFFSET[0])
    statements = Statements(monkeypatch)
    _, without = run_one(SlowSteps, {"report": False}, statements)
    slow, with_reports = run_one(SlowSteps, {"report": True}, statements)
    # Each report came within a second of the last write and was held back; its step then ended past
    # the second. Before, the end of the step wrote it on its own (a savepoint, an UPDATE, its release).
    assert with_reports == without
    assert (slow.refresh().progress["done"], slow.progress["note"]) == (2, "second")


def test_a_report_rides_along_with_a_checkpoint_once_the_interval_has_passed(monkeypatch):
    from django_procedures.runtime import progress

    real = time.monotonic
    monkeypatch.setattr(progress.time, "monotonic", lambda: real() + OFFSET[0])
    handle, _ = run_one(TwoSteps, {"n": 3, "takes": 2.0})
    # What the second step found stored: the first step's latest report, written by its checkpoint (held back
    # until the completion before).
    assert handle.refresh().output == {"done": 3, "total": 6, "note": "first"}
    assert (handle.progress["done"], handle.progress["note"]) == (6, "second")


def test_within_the_interval_a_checkpoint_carries_no_report_and_the_completion_the_latest(monkeypatch):
    statements = Statements(monkeypatch)
    handle, _ = run_one(TwoSteps, {"n": 3}, statements)
    # A checkpoint within a second of the claim's start (or of the last report written) leaves its report held
    # back: short steps do not send one with every checkpoint. The completion carries the latest.
    assert handle.refresh().output is None
    assert (handle.progress["done"], handle.progress["note"]) == (6, "second")
    if connection.vendor == "postgresql":  # each is one statement there (store/progress_sql.py)
        checkpoint, completion = [sql for sql in statements.sent if sql.lstrip().startswith("WITH run AS")]
        assert "progress" not in checkpoint and "progress" in completion


def test_a_report_rides_along_with_a_suspension():
    handle = Suspends.submit({})
    (c,) = claim("t", type_names=[Suspends.type_name], limit=1, lease_seconds=30)
    assert execute(RunningClaim(c)) == "suspended"
    assert handle.refresh().status == "waiting"
    assert (handle.progress["done"], handle.progress["note"]) == (1, "spawned")


@pytest.mark.parametrize("write", ["checkpoint", "completion"])
def test_a_fenced_out_write_writes_no_report(write):
    handle = TwoSteps.submit({"n": 0})
    (c,) = claim("t", type_names=[TwoSteps.type_name], limit=1, lease_seconds=30)
    operations.cancel(handle.id)  # bumps the lease token
    records = [StepRecord(0, "first", 1, T, T)]
    with pytest.raises(LeaseLost):
        if write == "checkpoint":
            transitions.commit_checkpoint(c, records, {}, "second", {"done": 1, "total": 2, "note": "late"})
        else:
            transitions.complete(c, records, {}, None, {"done": 1, "total": 2, "note": "late"})
    assert ProcedureRun.objects.values_list("progress", "progress_updated_at").get(id=handle.id) == (None, None)
