"""The maintenance sweep does not read the sleeping rows (issue 26, "Measured": the sleepers benchmark).

Every worker runs the sweep every few seconds. Its safety net for stranded parents
(``tree.wake_stranded_parents``) reads the procedures waiting for their children;
beside a million sleeping or event-waiting procedures (``status = 'waiting'`` too)
PostgreSQL read the whole table for it (a parallel sequential scan, 0.5-0.9 s, in
every sweep of every worker). The counters are the transaction's own
(``pg_stat_xact_user_tables``): rows read from the table, whatever the machine's load.
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_procedures.models import ProcedureRun
from django_procedures.store import tree

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

SLEEPERS = 3000
PARENTS = 3


def _seed(n: int, waiting_for: str) -> None:
    """``n`` waiting runs waiting for ``waiting_for`` (a timer's with a wake time) in one INSERT ... SELECT."""
    table = ProcedureRun._meta.db_table
    wake = "now() + interval '1 day'" if waiting_for != "children" else "NULL"
    with connection.cursor() as cursor:
        cursor.execute(f"""
            INSERT INTO {table} (id, type_name, queue, state, status, step, step_name, attempt, failures, lost,
                in_unsafe_step, depth, pending_children, suspension, spawned_in, position, failure_handled,
                lock_keys, keys_held, waiting_for_keys, in_rollback, rollback_error, priority, run_at, lease_token,
                lease_owner, error, traceback, failed_step, failure_can_retry, created_at, retried_by,
                manual_retries, awaited, waiting_for, wake_at)
            SELECT gen_random_uuid(), 'sleepers.Sleeper', 'default', '{{}}'::jsonb, 'waiting', 1, 'next', 0, 0, 0,
                false, 0, 1, 1, 0, 0, false, '[]'::jsonb, false, false, false, '', 0, now(), 1, '', '', '', '',
                false, now(), '', 0, false, %s, {wake}
            FROM generate_series(1, %s)
        """, [waiting_for, n])


def _read() -> int:
    """Rows this transaction has read from the procedures table so far, by sequential scans and indexes."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT seq_tup_read + COALESCE(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables "
                       "WHERE relid = %s::regclass", [ProcedureRun._meta.db_table])
        return cursor.fetchone()[0]


@pytest.fixture
def sleepers_beside_a_few_parents(analyze) -> None:
    _seed(SLEEPERS // 2, "timer")
    _seed(SLEEPERS // 2, "event")
    _seed(PARENTS, "children")
    analyze()


def test_the_stranded_parents_read_skips_the_sleepers(sleepers_beside_a_few_parents):
    before = _read()
    assert tree.wake_stranded_parents() == PARENTS  # childless waiting parents: stranded, and woken
    assert _read() - before <= 10 * PARENTS, "the sweep's stranded parents read read the sleeping rows"
