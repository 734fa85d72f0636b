"""Checkpoints and completions in one statement: fenced, with their Step rows and lease close, or nothing."""

import pytest
from django.db.models import F

from django_procedures.exceptions import LeaseLost
from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.store import db, fence, transitions
from django_procedures.store.claim import claim
from django_procedures.store.db import text_array
from testproject.testapp.procedures import ThreeSteps

pytestmark = pytest.mark.django_db


def claimed():
    ThreeSteps.submit()
    (c,) = claim("test-worker", type_names=[ThreeSteps.type_name], limit=1, lease_seconds=30)
    return c


def records(c, *names):
    from django_procedures import clock

    now = clock.now()
    return [fence.StepRecord(c.step + i, name, 1, now, now) for i, name in enumerate(names)]


def steal(c):
    ProcedureRun._writer.filter(id=c.id).update(lease_token=F("lease_token") + 1)


def test_a_checkpoint_commits_the_state_and_one_step_row():
    c = claimed()
    transitions.commit_checkpoint(c, records(c, "fetch"), {"n": 1}, "transform")
    run = ProcedureRun.objects.get(id=c.id)
    assert (run.status, run.step, run.step_name, run.state) == ("running", 1, "transform", {"n": 1})
    assert list(Step.objects.filter(procedure_id=c.id).values_list("index", "name", "status", "state")) == [
        (0, "fetch", "done", {"n": 1})]
    assert Lease.objects.get(procedure_id=c.id).released_at is None  # still held


def test_a_completion_of_several_steps_writes_each_and_the_state_on_the_last():
    c = claimed()
    transitions.complete(c, records(c, "fetch", "transform", "load"), {"n": 3}, {"out": "x"})
    run = ProcedureRun.objects.get(id=c.id)
    assert (run.status, run.step, run.step_name, run.output, run.lease_owner) == ("done", 3, "", {"out": "x"}, "")
    assert list(Step.objects.filter(procedure_id=c.id).order_by("index").values_list("index", "name", "state")) == [
        (0, "fetch", None), (1, "transform", None), (2, "load", {"n": 3})]
    lease = Lease.objects.get(procedure_id=c.id)
    assert lease.outcome == "completed" and lease.released_at is not None


@pytest.mark.parametrize("write", ["checkpoint", "complete"])
def test_a_write_that_lost_its_lease_changes_nothing(write):
    c = claimed()
    steal(c)
    with pytest.raises(LeaseLost):
        if write == "checkpoint":
            transitions.commit_checkpoint(c, records(c, "fetch"), {"late": True}, "transform")
        else:
            transitions.complete(c, records(c, "fetch"), {"late": True}, None)
    run = ProcedureRun.objects.get(id=c.id)
    assert (run.status, run.step, run.state) == ("running", 0, {})
    assert not Step.objects.filter(procedure_id=c.id).exists()
    assert Lease.objects.get(procedure_id=c.id).released_at is None  # the new holder's business


@pytest.mark.postgres
def test_text_array_survives_any_characters():
    from django.db import connection

    values = ["app.Type", 'quo"te', "back\\slash", "com,ma", "{braces}", " spaced ", "", "NULL"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::text[]", [text_array(values)])
        assert cursor.fetchone()[0] == values


def prepared_here() -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.postgres
def test_the_hot_statements_are_prepared_once_per_connection(settings):
    from django_procedures.testing import drain

    settings.PROCEDURES = {"PREPARED_STATEMENTS": True}
    ThreeSteps.submit_many([{}, {}])
    drain()
    prepared = prepared_here()
    assert any("WITH picked AS" in s for s in prepared)  # the claim
    assert sum("WITH run AS" in s for s in prepared) == 2  # checkpoint and completion, each prepared once


@pytest.mark.postgres
def test_prepared_statements_off_prepares_nothing(settings):
    from django_procedures.testing import drain

    settings.PROCEDURES = {"PREPARED_STATEMENTS": False}
    ThreeSteps.submit_many([{}, {}])
    assert prepared_here() == []
    drain()
    assert set(ProcedureRun.objects.values_list("status", flat=True)) == {"done"}
    assert prepared_here() == []


def synchronous_commit(setting: str = "synchronous_commit") -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {setting}")
        return cursor.fetchone()[0]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_claim_alone_commits_without_waiting_for_its_flush_and_without_bitmap_scans(monkeypatch):
    """Only the claim's own transaction: a lost claim loses nothing, a lost checkpoint would."""
    from django_procedures.store import locks
    from django_procedures.testing import drain

    seen = []
    grant_due = locks.grant_due

    def spy(**kwargs):
        seen.append((synchronous_commit(), synchronous_commit("enable_bitmapscan")))
        return grant_due(**kwargs)

    monkeypatch.setattr(locks, "grant_due", spy)
    ThreeSteps.submit()
    assert synchronous_commit() == "on"
    drain()
    assert seen and set(seen) == {("off", "off")}  # inside each claim
    assert (synchronous_commit(), synchronous_commit("enable_bitmapscan")) == ("on", "on")  # and nowhere else
    assert set(ProcedureRun.objects.values_list("status", flat=True)) == {"done"}


@pytest.mark.postgres
def test_a_claim_inside_a_callers_transaction_leaves_its_commit_alone():
    from django.db import transaction

    ThreeSteps.submit()
    with transaction.atomic():
        claim("test-worker", type_names=[ThreeSteps.type_name], limit=1, lease_seconds=30)
        assert synchronous_commit() == "on"


class _Commands:
    """The transaction commands (``BEGIN``, ``COMMIT``...) psycopg sends on any connection of this process, and
    ``WRITE`` where a checkpoint or completion statement (``store.progress_sql``) was sent among them."""

    def __init__(self, monkeypatch) -> None:
        import psycopg

        self.sent: list[str] = []
        send = psycopg.Connection._exec_command
        bound_execute = db._BoundCursor.execute

        def spy(conn, command, *args, **kwargs):
            self.sent.append(bytes(command).decode().split()[0].upper())
            return send(conn, command, *args, **kwargs)

        def write(cursor, sql, params):
            bound_execute(cursor, sql, params)  # (psycopg sends the BEGIN it needs from inside)
            if "WITH run AS" in sql:
                self.sent.append("WRITE")

        monkeypatch.setattr(psycopg.Connection, "_exec_command", spy)
        monkeypatch.setattr(db._BoundCursor, "execute", write)


def _claim_one(type_name: str):
    (c,) = claim("test-worker", type_names=[type_name], limit=1, lease_seconds=30)
    return c


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_checkpoints_and_the_completion_of_steps_that_run_no_sql_are_one_round_trip_each(monkeypatch):
    """No BEGIN and no COMMIT around a write that is the whole of its transaction (``db.sole_statement``)."""
    from django_procedures.runtime.executor import execute
    from django_procedures.runtime.running import RunningClaim
    from testproject.testapp.procedures import Counter

    run = Counter.submit({"target": 3})
    c = _claim_one(Counter.type_name)
    commands = _Commands(monkeypatch)
    assert execute(RunningClaim(c)).value == "completed"
    assert commands.sent == ["WRITE"] * 3  # two checkpoints and the completion, each alone
    row = ProcedureRun.objects.get(id=run.id)
    assert (row.status, row.step, row.output, row.state) == ("done", 3, 3, {"target": 3, "n": 3})
    assert list(Step.objects.filter(procedure_id=run.id).order_by("index").values_list("index", "status")) == [
        (0, "done"), (1, "done"), (2, "done")]
    assert Lease.objects.get(procedure_id=run.id).outcome == "completed"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_steps_own_writes_still_commit_in_one_transaction_with_its_checkpoint(monkeypatch):
    from django_procedures.runtime.executor import execute
    from django_procedures.runtime.running import RunningClaim
    from testproject.testapp.models import Effect

    run = ThreeSteps.submit()
    c = _claim_one(ThreeSteps.type_name)
    commands = _Commands(monkeypatch)
    assert execute(RunningClaim(c)).value == "completed"
    # Each step: its Effect row (which opens the transaction) and its checkpoint, together.
    assert commands.sent == ["BEGIN", "WRITE", "COMMIT"] * 3
    assert Effect.objects.filter(procedure_id=run.id).count() == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_completion_whose_finish_hooks_write_stays_in_their_transaction(monkeypatch):
    """Releasing lock keys follows the completion: the two must commit together, so it does not go alone."""
    from django_procedures import LockKey, Procedure, step
    from django_procedures.models import KeyRequest
    from django_procedures.runtime.executor import execute
    from django_procedures.runtime.running import RunningClaim
    from django_procedures.testing import isolated_registry

    with isolated_registry():

        class HoldsAKey(Procedure):
            type_name = "tests.HoldsAKey"

            def lock_keys(self):
                return [LockKey.exclusive("k")]

            @step
            def run(self, ctx):
                return None

        run = HoldsAKey.submit({})
        c = _claim_one(HoldsAKey.type_name)
        commands = _Commands(monkeypatch)
        assert execute(RunningClaim(c)).value == "completed"
    # Sent alone, the completion would come before the BEGIN of the keys' release.
    assert commands.sent == ["BEGIN", "WRITE", "COMMIT"]
    assert ProcedureRun.objects.get(id=run.id).status == "done"
    assert not KeyRequest.objects.filter(procedure_id=run.id).exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_last_child_completes_in_the_transaction_that_wakes_its_parent(monkeypatch):
    """A child's completion is followed by waking its parent (``Ending.hooks_write``): they commit together."""
    from django_procedures import Procedure, Status, step
    from django_procedures.runtime.executor import execute
    from django_procedures.runtime.running import RunningClaim
    from django_procedures.testing import isolated_registry

    with isolated_registry():

        class Quiet(Procedure):
            type_name = "tests.QuietChild"

            @step
            def run(self, ctx):
                return None  # no SQL of its own: without the parent, its completion would go alone

        class Spawns(Procedure):
            type_name = "tests.SpawnsQuiet"

            @step
            def spawn(self, ctx):
                return Status.suspended([Quiet({})])

            @step
            def collect(self, ctx):
                return None

        parent = Spawns.submit({})
        assert execute(RunningClaim(_claim_one(Spawns.type_name))).value == "suspended"
        child = _claim_one(Quiet.type_name)
        commands = _Commands(monkeypatch)
        assert execute(RunningClaim(child)).value == "completed"
    # Sent alone, the completion would come before the BEGIN of the wake-up's transaction.
    assert commands.sent == ["BEGIN", "WRITE", "COMMIT"]
    assert ProcedureRun.objects.get(id=parent.id).status == "ready"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_scheduled_run_completes_in_the_transaction_that_completes_its_schedule_run(monkeypatch):
    """A scheduled run's completion is followed by its schedule's metrics and freed slot: they commit together.

    Two things keep it so: ``Ending.hooks_write`` names the schedule, and the final path locks the schedule row
    before the write (``final.lock_for_final``), which opens the transaction anyway. This fails only when both go.
    """
    from django_procedures import Procedure, step, trigger_schedule
    from django_procedures.models import Schedule
    from django_procedures.runtime.executor import execute
    from django_procedures.runtime.running import RunningClaim
    from django_procedures.scheduling import register_schedule
    from django_procedures.testing import isolated_registry

    with isolated_registry():

        class QuietTick(Procedure):
            type_name = "tests.QuietTick"

            @step
            def run(self, ctx):
                return None  # no SQL of its own: without the schedule, its completion would go alone

        schedule, _ = register_schedule("quiet", QuietTick, period=3600)
        assert trigger_schedule(schedule)["started"] == 1
        c = _claim_one(QuietTick.type_name)
        assert c.schedule_id == schedule.id
        commands = _Commands(monkeypatch)
        assert execute(RunningClaim(c)).value == "completed"
    # Sent alone, the completion would come before the BEGIN of the schedule's update.
    assert commands.sent == ["BEGIN", "WRITE", "COMMIT"]
    row = Schedule.objects.get(id=schedule.id)
    assert (row.runs, row.active_runs) == (1, 0)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_sole_statement_inside_a_callers_transaction_stays_in_it():
    """Only the outermost transaction, the one the statement ends, is ever left out: a caller's rollback holds."""
    from django.db import transaction

    from django_procedures.store.db import sole_statement

    c = claimed()
    with transaction.atomic():
        with transaction.atomic():
            with sole_statement():
                transitions.commit_checkpoint(c, records(c, "fetch"), {"n": 1}, "transform", ends_transaction=True)
        transaction.set_rollback(True)
    assert ProcedureRun.objects.get(id=c.id).step == 0
    assert not Step.objects.filter(procedure_id=c.id).exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_checkpoint_and_a_completion_find_their_row_by_primary_key(analyze):
    """Not through the partial lease index: statistics that see almost nothing running make the planner scan it
    whole, reading every leased row of the table to find one."""
    import itertools
    import re

    from django.db import connection

    from django_procedures.store import progress_sql

    ThreeSteps.submit_many([{}] * 1000)
    analyze()  # as after a burst of submits: none running
    c = _claim_one(ThreeSteps.type_name)
    with connection.cursor() as cursor:
        for complete, progress in itertools.product((False, True), (False, True)):
            names: list[str] = []

            def number(match, names=names):
                if match[1] not in names:
                    names.append(match[1])
                return f"${names.index(match[1]) + 1}"

            sql = re.sub(r"%\((\w+)\)s", number, progress_sql._statement(complete, 1, progress))
            cursor.execute("SET plan_cache_mode = force_generic_plan")
            cursor.execute(f"PREPARE fenced_write AS {sql}")
            try:
                now = "2026-01-01T00:00:00Z"
                values = {"id": str(c.id), "token": c.lease_token, "state": "{}", "now": now, "step": 1,
                          "step_name": "", "output": "null", "index0": 0, "name0": "one", "attempt0": 1,
                          "started0": now, "finished0": now, "progress": "{}"}
                cursor.execute(f"EXPLAIN EXECUTE fenced_write({', '.join(['%s'] * len(names))})",
                               [values[n] for n in names])
                plan = "\n".join(row[0] for row in cursor.fetchall())
            finally:
                cursor.execute("DEALLOCATE fenced_write")
                cursor.execute("RESET plan_cache_mode")
            assert f"Index Scan using {ProcedureRun._meta.db_table}_pkey on {ProcedureRun._meta.db_table}" in plan
            assert "procedures_lease_idx" not in plan


def test_next_due_is_the_earliest_ready_or_retrying_run_of_the_types_and_queues_asked_for():
    from datetime import UTC, datetime, timedelta

    from django_procedures.store.claim import next_due

    t0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    ThreeSteps.submit(run_after=t0 + timedelta(hours=3))
    ThreeSteps.submit(run_after=t0 + timedelta(hours=2), queue="other")
    waiting = ThreeSteps.submit(run_after=t0)
    ProcedureRun._writer.filter(id=waiting.id).update(waiting_for_keys=True)  # its keys decide, not the time
    done = ThreeSteps.submit(run_after=t0)
    ProcedureRun._writer.filter(id=done.id).update(status="done")
    retrying = ThreeSteps.submit(run_after=t0)
    ProcedureRun._writer.filter(id=retrying.id).update(status="retrying", run_at=t0 + timedelta(hours=4))
    ProcedureRun._writer.create(type_name="elsewhere.NotHere", step_name="x", run_at=t0)
    types = [ThreeSteps.type_name]
    assert next_due(type_names=types) == t0 + timedelta(hours=2)
    assert next_due(type_names=types, queues=["default"]) == t0 + timedelta(hours=3)
    assert next_due(type_names=types, queues=["nowhere"]) is None
    assert next_due(type_names=["elsewhere.NotHere"]) == t0
    assert next_due(type_names=[]) is None


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_step_that_marks_its_transaction_for_rollback_has_its_checkpoint_rolled_back_with_it():
    from django.db import transaction

    from django_procedures import Procedure, step
    from django_procedures.runtime.executor import execute
    from django_procedures.runtime.running import RunningClaim
    from django_procedures.testing import isolated_registry

    with isolated_registry():

        class GivesUp(Procedure):
            type_name = "tests.GivesUp"

            @step
            def first(self, ctx):
                transaction.set_rollback(True)

            @step
            def second(self, ctx):
                return None

        run = GivesUp.submit({})
        c = _claim_one(GivesUp.type_name)
        execute(RunningClaim(c))
    # The first step's checkpoint is part of its transaction, which rolled back: it was not sent alone.
    assert not Step.objects.filter(procedure_id=run.id, name="first").exists()
