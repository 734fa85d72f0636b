"""The step engine in-process, through drain(): retries, failures, checkpoints, clocks."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction
from django.db.models import F

from django_procedures import NonRetryable, Procedure, Status, step
from django_procedures.exceptions import InvalidOperation
from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.testing import drain
from testproject.testapp.models import Effect
from testproject.testapp.procedures import BadCheckpoint, Counter, Flaky, NonAtomicSteps, Refuses, ThreeSteps

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
pytestmark = pytest.mark.django_db


def steps_of(handle):
    return list(Step.objects.filter(procedure_id=handle.id).order_by("id").values_list("name", "attempt", "status"))


def test_retry_until_success_within_budget_leaves_no_writes_of_failed_attempts():
    handle = Flaky.submit({"fail_times": 2}, run_after=T0)
    first = drain(now=T0)
    assert handle.refresh().status == "retrying"
    assert first.next_due == T0 + timedelta(seconds=10)  # initial_delay 10, no jitter
    assert drain(now=T0 + timedelta(seconds=9)).claimed == 0  # not due yet
    second = drain(now=T0 + timedelta(seconds=10))
    assert second.next_due == T0 + timedelta(seconds=30)  # backoff 2: 10 * 2
    drain(now=T0 + timedelta(seconds=30))
    assert handle.refresh().status == "done"
    assert handle.output == {"attempt": 3}
    assert steps_of(handle) == [("prepare", 1, "done"), ("work", 1, "failed"), ("work", 2, "failed"),
                                ("work", 3, "done")]
    # The failed attempts' Effect rows rolled back with their step's transaction.
    assert list(Effect.objects.filter(procedure_id=handle.id).values_list("step", "attempt")) == [("work", 3)]
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.finished_at == T0 + timedelta(seconds=30)
    assert run.started_at == T0


def test_budget_exhausted_records_the_failure():
    handle = Flaky.submit({"fail_times": 9}, run_after=T0)
    for seconds in (0, 10, 30):
        drain(now=T0 + timedelta(seconds=seconds))
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed"
    assert run.error == "RuntimeError: flaky failure on attempt 3"
    assert "Traceback" in run.traceback and "flaky failure" in run.traceback
    assert run.failed_step == "work"
    assert run.failure_can_retry is True
    assert run.finished_at == T0 + timedelta(seconds=30)
    assert run.failures == 3
    # Each failed attempt's Step row keeps its own traceback; the run keeps the latest one.
    failed = list(Step.objects.filter(procedure_id=handle.id, status="failed").order_by("attempt")
                  .values_list("attempt", "error", "traceback"))
    assert [(a, e) for a, e, _ in failed] == [(n, f"RuntimeError: flaky failure on attempt {n}") for n in (1, 2, 3)]
    for n, _, trace in failed:
        assert trace.startswith("Traceback (most recent call last)") and f"on attempt {n}" in trace
    assert failed[-1][2] == run.traceback
    outcomes = list(Lease.objects.filter(procedure_id=handle.id).values_list("outcome", flat=True))
    assert outcomes == ["retried", "retried", "failed"]  # prepare and work 1, then work 2, then work 3


def test_manual_retry_resumes_from_the_failed_step_with_a_fresh_budget():
    handle = Flaky.submit({"fail_times": 5}, run_after=T0)
    for seconds in (0, 10, 30):
        drain(now=T0 + timedelta(seconds=seconds))
    assert handle.refresh().status == "failed"
    handle.retry(by="alice")
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.status, run.retried_by, run.failures, run.manual_retries) == ("ready", "alice", 0, 1)
    for seconds in (100, 110, 130):
        drain(now=T0 + timedelta(seconds=seconds))
    assert handle.refresh().status == "done"
    assert handle.output == {"attempt": 6}
    names = steps_of(handle)
    assert names.count(("prepare", 1, "done")) == 1  # the committed step is not run again
    assert [a for n, a, s in names if n == "work"] == [1, 2, 3, 4, 5, 6]  # numbering continues


def test_non_retryable_fails_at_once_and_can_forbid_manual_retry():
    retryable = Refuses.submit()
    final = Refuses.submit({"manual_retry": False})
    drain()
    assert retryable.refresh().status == "failed" and retryable.error == "NonRetryable: the tenant does not exist"
    assert ProcedureRun.objects.get(id=retryable.id).failure_can_retry is True
    assert ProcedureRun.objects.get(id=final.id).failure_can_retry is False
    with pytest.raises(InvalidOperation, match="not worth a manual retry"):
        final.retry()


def test_retry_of_a_procedure_that_did_not_fail_is_refused():
    handle = ThreeSteps.submit()
    with pytest.raises(InvalidOperation, match="is ready; only failed procedures can be retried"):
        handle.retry()


def test_submit_is_part_of_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        handle = ThreeSteps.submit({"n": 1})
        raise RuntimeError("the caller's transaction rolls back")
    assert not ProcedureRun.objects.filter(id=handle.id).exists()


def test_idempotency_key_returns_the_existing_procedure():
    first = ThreeSteps.submit({"n": 1}, key="order:1")
    again = ThreeSteps.submit({"n": 2}, key="order:1")
    assert again.id == first.id
    assert ProcedureRun.objects.filter(key="order:1").count() == 1
    assert ProcedureRun.objects.get(key="order:1").state == {"n": 1}
    many = ThreeSteps.submit_many([{}, {}, {}, {}], keys=["order:1", "order:2", None, "order:2"])
    assert many[0].id == first.id
    assert many[1].id == many[3].id != many[2].id
    assert ProcedureRun.objects.count() == 3


def test_submit_many_inserts_in_one_statement(django_assert_max_num_queries):
    with django_assert_max_num_queries(4):  # savepoint, INSERT, NOTIFY, release
        handles = ThreeSteps.submit_many([{"i": i} for i in range(50)])
    assert len(handles) == 50
    assert [h.refresh().run.state["i"] for h in handles[:3]] == [0, 1, 2]


@pytest.mark.parametrize(("state", "fragment"), [
    ({"x": float("nan")}, "state['x'] is nan"),
    ({"when": datetime(2030, 1, 1)}, "state['when'] is a datetime"),
    ([1, 2], "state must be a dict"),
])
def test_unserialisable_state_is_a_type_error_at_submit(state, fragment):
    with pytest.raises(TypeError, match=fragment.replace("[", r"\[")):
        ThreeSteps.submit(state)
    assert ProcedureRun.objects.count() == 0


def test_unserialisable_checkpoint_fails_the_attempt_naming_the_key():
    handle = BadCheckpoint.submit()
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed"
    assert "state['ratio'] is nan" in run.error and run.error.startswith("NonRetryable: cannot save the checkpoint")
    assert not Effect.objects.filter(procedure_id=handle.id).exists()  # the step's writes rolled back
    assert run.state == {}  # the last committed state is kept


def test_a_removed_step_parks_the_procedure():
    run = ProcedureRun._writer.create(type_name=ThreeSteps.type_name, step=1, step_name="two_renamed",
                                      run_at=T0, state={})
    drain(now=T0)
    run.refresh_from_db()
    assert run.status == "failed"
    assert "step 'two_renamed' no longer exists in testapp.ThreeSteps" in run.error
    assert run.failure_can_retry is True
    assert not Effect.objects.exists()


def test_unknown_types_are_left_alone():
    run = ProcedureRun._writer.create(type_name="elsewhere.NotHere", step_name="x", run_at=T0)
    report = drain(now=T0)
    assert report.claimed == 0
    run.refresh_from_db()
    assert run.status == "ready" and run.lease_token == 0


def test_drain_clock_decides_what_is_due_and_the_times_recorded():
    later = ThreeSteps.submit(run_after=T0 + timedelta(hours=1))
    report = drain(now=T0)
    assert report.claimed == 0 and report.next_due == T0 + timedelta(hours=1)
    drain(now=T0 + timedelta(hours=2))
    run = ProcedureRun.objects.get(id=later.id)
    assert run.status == "done"
    assert run.started_at == run.finished_at == T0 + timedelta(hours=2)
    assert set(Step.objects.filter(procedure_id=later.id).values_list("finished_at", flat=True)) == {
        T0 + timedelta(hours=2)}


def test_priority_then_run_at_order():
    low = ThreeSteps.submit({"n": "low"}, run_after=T0 - timedelta(minutes=5))
    high = ThreeSteps.submit({"n": "high"}, priority=5, run_after=T0)
    older = ThreeSteps.submit({"n": "older"}, run_after=T0 - timedelta(minutes=9))
    drain(now=T0)
    order = list(Lease.objects.order_by("id").values_list("procedure_id", flat=True))
    assert order == [high.id, older.id, low.id]


def test_execute_state_machine_checkpoints_each_call():
    handle = Counter.submit({"target": 3})
    drain()
    assert handle.refresh().output == 3
    assert steps_of(handle) == [("execute", 1, "done")] * 3
    states = list(Step.objects.filter(procedure_id=handle.id).order_by("index").values_list("state", flat=True))
    assert states == [{"n": 1, "target": 3}, {"n": 2, "target": 3}, {"n": 3, "target": 3}]


def test_persist_false_runs_the_next_step_without_a_checkpoint_in_between():
    handle = Counter.submit({"target": 3, "persist": False})
    drain()
    assert handle.refresh().output == 3
    states = list(Step.objects.filter(procedure_id=handle.id).order_by("index").values_list("state", flat=True))
    assert states == [None, None, {"n": 3, "target": 3, "persist": False}]


def test_non_atomic_steps_run_and_checkpoint():
    handle = NonAtomicSteps.submit()
    drain()
    assert handle.refresh().status == "done"
    assert ProcedureRun.objects.get(id=handle.id).state == {"fetched": True}


class StolenDuringStep(Procedure):
    """Its lease is taken over (as by another worker) while its non-atomic step runs."""

    type_name = "tests.StolenDuringStep"

    @step(atomic=False)
    def slow(self, ctx):
        ProcedureRun._writer.filter(id=ctx.procedure_id).update(lease_token=F("lease_token") + 1)
        self.state["late"] = True


def test_a_write_after_the_lease_moved_is_fenced_out():
    handle = StolenDuringStep.submit()
    report = drain()
    assert report["lost"] == 1
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.state == {} and run.step == 0  # the late checkpoint was dropped
    assert not Step.objects.filter(procedure_id=handle.id).exists()


class TimesOut(Procedure):
    type_name = "tests.TimesOut"

    @step(timeout=0.05)
    def slow(self, ctx):
        import time

        Effect.objects.create(procedure_id=ctx.procedure_id, step="slow")
        time.sleep(0.1)


def test_a_step_past_its_timeout_is_a_failed_attempt_and_its_writes_roll_back():
    handle = TimesOut.submit()
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "retrying" and "past its timeout of 0.05s" in run.error
    assert not Effect.objects.exists()


def test_leases_record_each_claim():
    handle = ThreeSteps.submit()
    drain()
    lease = Lease.objects.get(procedure_id=handle.id)
    assert (lease.token, lease.outcome) == (1, "completed")
    assert lease.released_at is not None and lease.worker.startswith("drain:")


def test_a_step_must_return_a_status():
    class ReturnsJunk(Procedure):
        type_name = "tests.ReturnsJunk"

        @step
        def bad(self, ctx):
            return 42

    handle = ReturnsJunk.submit()
    drain()
    assert "a step must return None or a Status" in handle.refresh().error


def test_non_retryable_error_types_from_the_policy():
    from django_procedures import RetryPolicy

    class Strict(Procedure):
        type_name = "tests.Strict"
        retry = RetryPolicy(max_attempts=5, non_retryable=(KeyError,))

        @step
        def look(self, ctx):
            raise KeyError("missing")

    handle = Strict.submit()
    drain()
    assert handle.refresh().status == "failed"


def test_done_output_must_be_json():
    class BadOutput(Procedure):
        type_name = "tests.BadOutput"

        @step
        def finish(self, ctx):
            return Status.done(output={"at": datetime(2030, 1, 1)})

    handle = BadOutput.submit()
    drain()
    assert "output['at'] is a datetime" in handle.refresh().error


def test_non_retryable_is_a_procedures_error():
    from django_procedures.exceptions import ProceduresError

    assert issubclass(NonRetryable, ProceduresError)


def test_non_idempotent_steps_cannot_have_a_timeout():
    with pytest.raises(TypeError, match="cannot have a timeout"):
        step(idempotent=False, timeout=5)


class NonAtomicMachine(Procedure):
    type_name = "tests.NonAtomicMachine"

    @step(atomic=False)
    def execute(self, ctx):
        from django.db import connection

        self.state["in_transaction"] = connection.in_atomic_block
        return Status.done()


def test_step_options_on_execute_apply_to_every_call():
    assert NonAtomicMachine.steps[0].atomic is False


class ChainedFlaky(Procedure):
    """Two steps chained without a checkpoint; the second fails on the group's first try."""

    type_name = "tests.ChainedFlaky"
    retry = __import__("django_procedures").RetryPolicy(max_attempts=3, initial_delay=0, jitter=0)

    @step
    def first(self, ctx):
        self.state.setdefault("first_attempts", []).append(ctx.attempt)
        return Status.executing(persist=False)

    @step
    def second(self, ctx):
        if ctx.attempt == 1:
            raise RuntimeError("once")
        self.state["second_attempt"] = ctx.attempt


def test_steps_chained_without_a_checkpoint_share_the_groups_attempt_number():
    handle = ChainedFlaky.submit()
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "done"
    assert run.state == {"first_attempts": [2], "second_attempt": 2}  # the failed try's state was discarded
    assert steps_of(handle) == [("second", 1, "failed"), ("first", 2, "done"), ("second", 2, "done")]


class ChargeThenFail(Procedure):
    """A non-idempotent step asking to chain without a checkpoint, then a step that fails once."""

    type_name = "tests.ChargeThenFail"
    retry = __import__("django_procedures").RetryPolicy(max_attempts=3, initial_delay=0, jitter=0)

    @step(idempotent=False)
    def charge(self, ctx):
        self.state["charges"] = self.state.get("charges", 0) + 1
        return Status.executing(persist=False)

    @step
    def record(self, ctx):
        if ctx.attempt == 1:
            raise RuntimeError("once")


def test_a_non_idempotent_step_is_always_checkpointed_before_the_next_one():
    handle = ChargeThenFail.submit()
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "done" and run.state == {"charges": 1}
    assert steps_of(handle) == [("charge", 1, "done"), ("record", 1, "failed"), ("record", 2, "done")]
