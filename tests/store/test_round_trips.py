"""Round trips and commits of the hot path: a claim, a checkpoint, a completion, each one statement where it can be."""

import pytest

from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.store import db, transitions
from django_procedures.store.claim import claim
from testproject.testapp.procedures import ThreeSteps
from tests.store.advancing import claim_one, claimed, records

pytestmark = pytest.mark.django_db


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


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_checkpoints_and_the_completion_of_steps_that_run_no_sql_are_one_round_trip_each(monkeypatch):
    """No BEGIN and no COMMIT around a write that is the whole of its transaction (``db.sole_statement``)."""
    from django_procedures.runtime.executor import execute
    from django_procedures.runtime.running import RunningClaim
    from testproject.testapp.procedures import Counter

    run = Counter.submit({"target": 3})
    c = claim_one(Counter.type_name)
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
    c = claim_one(ThreeSteps.type_name)
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
        c = claim_one(HoldsAKey.type_name)
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
        assert execute(RunningClaim(claim_one(Spawns.type_name))).value == "suspended"
        child = claim_one(Quiet.type_name)
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
        c = claim_one(QuietTick.type_name)
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
