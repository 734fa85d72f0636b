"""Checkpoints and completions in one statement: fenced, with their Step rows and lease close, or nothing."""

import pytest

from django_procedures.exceptions import LeaseLost
from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.store import transitions
from django_procedures.store.db import text_array
from testproject.testapp.procedures import ThreeSteps
from tests.store.advancing import claim_one, claimed, records, steal

pytestmark = pytest.mark.django_db


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
    c = claim_one(ThreeSteps.type_name)
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

    from django_procedures.store.due import next_due

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
        c = claim_one(GivesUp.type_name)
        execute(RunningClaim(c))
    # The first step's checkpoint is part of its transaction, which rolled back: it was not sent alone.
    assert not Step.objects.filter(procedure_id=run.id, name="first").exists()
