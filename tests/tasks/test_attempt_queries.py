"""What one task attempt costs in queries: the framework's signals are built from what the worker holds."""

import psycopg
import pytest

from django_procedures import Procedure, registry, step
from django_procedures.runtime.executor import execute
from django_procedures.runtime.running import RunningClaim
from django_procedures.store import claim as claims
from django_procedures.tasks.compat import TaskResultStatus, task_finished, task_started
from django_procedures.testing import isolated_registry
from testproject.testapp import tasks

# Committed for real, as on a worker: the completion's signals are sent after its commit.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

#: Statements one no-op attempt sends after its claim (counted below the worker's own cursors, which
#: Django's query log does not see).
ATTEMPT_QUERIES = 1


def queries_of_one_attempt(submit, monkeypatch) -> list[str]:
    submit()
    batch = claims.claim("counting", type_names=registry.type_names(), limit=1, lease_seconds=30)
    sent = []

    def counted(original):
        def counting(self, query, *args, **kwargs):
            sent.append(str(query).split(None, 3)[:3])
            return original(self, query, *args, **kwargs)
        return counting

    for name in ("execute", "executemany"):
        monkeypatch.setattr(psycopg.Cursor, name, counted(getattr(psycopg.Cursor, name)))
    assert execute(RunningClaim(batch[0])) == "completed"
    monkeypatch.undo()
    return sent


def test_a_no_op_task_attempt_costs_the_queries_of_a_one_step_procedure_signals_included(monkeypatch):
    seen = []

    def record(sender, task_result, **kwargs):
        seen.append((task_result.status, task_result.worker_ids, task_result.errors))

    task_started.connect(record)
    task_finished.connect(record)
    try:
        task = queries_of_one_attempt(tasks.noop.enqueue, monkeypatch)
    finally:
        task_started.disconnect(record)
        task_finished.disconnect(record)
    assert seen == [(TaskResultStatus.RUNNING, ["counting"], []), (TaskResultStatus.SUCCESSFUL, ["counting"], [])]

    with isolated_registry():
        class OneStep(Procedure):
            type_name = "test.OneNoopStep"

            @step(atomic=False)  # as a task's step
            def run(self, ctx):
                return None

        procedure = queries_of_one_attempt(OneStep.submit, monkeypatch)
    assert len(task) == len(procedure) == ATTEMPT_QUERIES
