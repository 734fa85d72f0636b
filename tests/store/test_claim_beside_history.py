"""A claim's cost follows the backlog, not the history: a type the statistics have not seen yet must not make
every claim read every finished run of that type (issue 15: the history benchmark's 11 % claim rate).

The table is analyzed while it holds only another type's history (and some of its runs scheduled for later), as
autovacuum leaves a table of millions long after a new type starts; the planner then estimates the new type at one
row. The counters are the transaction's
own (``pg_stat_xact_user_tables``): rows fetched from the table by any index, whatever the machine's load.
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_procedures.models import ProcedureRun
from django_procedures.store import claim, due

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

MINE, OTHER = "history.Mine", "history.Other"
HISTORY = 2000  # finished runs of the worker's own type, unknown to the statistics
LATER = 200  # runs of the other type scheduled for later: with the 3 due, the backlog a statement may read


def _seed(type_name: str, status: str, n: int, run_at: str = "now() - interval '1 minute'") -> None:
    """``n`` runs of ``type_name`` in one INSERT ... SELECT (the defaults of every other column)."""
    table = ProcedureRun._meta.db_table
    finished = "NULL" if status in ("ready", "retrying") else "now() - interval '1 day'"
    with connection.cursor() as cursor:
        cursor.execute(f"""
            INSERT INTO {table} (id, type_name, queue, state, status, step, step_name, attempt, failures, lost,
                in_unsafe_step, depth, pending_children, suspension, spawned_in, position, failure_handled,
                lock_keys, keys_held, waiting_for_keys, in_rollback, rollback_error, priority, run_at, lease_token,
                lease_owner, error, traceback, failed_step, failure_can_retry, created_at, finished_at, retried_by,
                manual_retries, awaited)
            SELECT gen_random_uuid(), %s, 'default', '{{}}'::jsonb, %s, 0, '', 0, 0, 0, false, 0, 0, 0, 0, 0, false,
                '[]'::jsonb, false, false, false, '', 0, {run_at}, 0, '', '', '', '', false,
                now() - interval '1 day', {finished}, '', 0, false
            FROM generate_series(1, %s)
        """, [type_name, status, n])


def _fetched() -> int:
    """Rows this transaction has fetched from the procedures table through an index so far."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relid = %s::regclass",
                       [ProcedureRun._meta.db_table])
        return cursor.fetchone()[0]


@pytest.fixture
def history_the_statistics_never_saw(analyze) -> None:
    _seed(OTHER, "done", 3000)
    _seed(OTHER, "ready", LATER, run_at="now() + interval '30 days'")  # scheduled for later: not due
    analyze()
    _seed(MINE, "done", HISTORY)
    _seed(MINE, "ready", 3)


def test_a_claim_does_not_read_the_finished_runs_of_its_types(history_the_statistics_never_saw):
    before = _fetched()
    claimed = claim.claim("w1", type_names=[MINE], queues=["default"], limit=3, lease_seconds=30)
    assert len(claimed) == 3
    assert _fetched() - before <= LATER + 3, "the claim read its type's finished history"


def test_next_due_does_not_read_the_finished_runs_of_its_types(history_the_statistics_never_saw):
    before = _fetched()
    assert due.next_due(type_names=[MINE], queues=["default"]) is not None
    assert _fetched() - before <= LATER + 3, "next_due read its type's finished history"
