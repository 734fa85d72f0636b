"""The admin plans' table: procedures seeded with ``INSERT ... SELECT generate_series`` in the shape a busy
site has (roots and trees of children finished over 400 days, failures with tracebacks, some unfinished now,
runs of 40 schedules), a ``Lease`` per started procedure and a ``Step`` per finished one.

``benchmarks/admin_plans.py`` reads the admin's query plans against it; the history benchmark seeds it too.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: (type name, queue, weight)
TYPES = [("emails.SendWelcomeEmail", "emails", 5), ("emails.SendReceipt", "emails", 4),
         ("billing.ChargeInvoice", "billing", 3), ("billing.RefundPayment", "billing", 1),
         ("exports.BuildMonthlyReport", "exports", 1), ("accounts.CloseAccount", "default", 1),
         ("shipping.BookCourier", "default", 2), ("crm.SyncContact", "default", 3),
         ("tenants.ProvisionTenant", "default", 1)]
ERRORS = ["TimeoutError: upstream did not answer within 30s", "ConnectionResetError: peer reset the connection",
          "NonRetryable: the card was declined"]

# One expression per column for a row numbered g (1..n) of a given kind; ``t`` is the type index (1-based),
# ``age`` how long ago it was created. Kinds override some of them.
BASE = {
    "id": "md5(%(kind)s || g)::uuid",
    "type_name": "(%(types)s::text[])[t]",
    "queue": "(%(queues)s::text[])[t]",
    "state": "jsonb_build_object('order_id', g, 'customer', 'cus_' || (g * 7919 %% 100003), 'password', 'x')",
    "status": "'done'", "step": "3", "step_name": "''", "step_started_at": "now() - age + interval '2 seconds'",
    "attempt": "1", "failures": "0", "lost": "0", "in_unsafe_step": "false",
    "parent_id": "NULL", "root_id": "NULL", "depth": "0", "pending_children": "0", "suspension": "0",
    "spawned_in": "0", "position": "0", "failure_handled": "false", "lock_keys": "'[]'::jsonb",
    "keys_held": "false", "waiting_for_keys": "false", "limits": "NULL", "in_rollback": "false", "rollback_error": "''",
    "priority": "0", "key": "CASE WHEN g %% 5 = 0 THEN %(kind)s || '-key-' || g END",
    "run_at": "now() - age", "lease_token": "1", "lease_owner": "''", "lease_expires_at": "NULL",
    "output": "jsonb_build_object('ok', true)", "error": "''", "traceback": "''", "failed_step": "''",
    "failure_can_retry": "false", "created_at": "now() - age", "started_at": "now() - age + interval '1 second'",
    "finished_at": "now() - age + interval '4 seconds'", "retried_at": "NULL", "retried_by": "''",
    "manual_retries": "0", "schedule_id": "NULL", "tick_at": "NULL", "awaited": "false", "trace_context": "NULL",
    "version": "1", "waiting_for": "''", "wake_at": "NULL", "submitted_state": "NULL", "rerun_of_id": "NULL",
    "waiting_events": "NULL",
    # One procedure in ten reported progress (the list draws a bar for it).
    "progress": "CASE WHEN g %% 10 = 0 THEN jsonb_build_object('done', g %% 100, 'total', 100, 'note', 'rows') END",
    "progress_updated_at": "CASE WHEN g %% 10 = 0 THEN now() - age + interval '3 seconds' END",
}
FAILED = {
    "status": "(ARRAY['failed','failed','failed','failed','rolled_back','cancelled'])[1 + g %% 6]",
    "step": "1", "step_name": "'call_upstream'", "attempt": "4", "failures": "3", "output": "NULL",
    "error": "(%(errors)s::text[])[1 + g %% 3]", "failed_step": "'call_upstream'",
    "traceback": "'Traceback (most recent call last):\n  ...\n' || (%(errors)s::text[])[1 + g %% 3]",
    "failure_can_retry": "g %% 2 = 0",
}
#: Unfinished, and staying so while a benchmark runs beside them: none is due or claimable, no lease expires,
#: and each waiting parent has unfinished children (the four rows before it). The benchmark's workers register
#: none of these types, so a due one would be passed over by every claim (and an expired lease swept, a
#: childless parent woken, into more of them): that measures rows of unknown types, not the length of history.
_OPEN_PARENT = "md5('open' || (g - g %% 5 + 4))::uuid"
UNFINISHED = {
    "status": "(ARRAY['ready','ready','retrying','running','waiting'])[1 + g %% 5]",
    "step": "1", "step_name": "'call_upstream'", "output": "NULL", "finished_at": "NULL",
    "run_at": "now() + interval '30 days' + (g %% 600) * interval '1 second'",
    "lease_owner": "CASE WHEN g %% 5 = 3 THEN 'worker-' || (g %% 8) || '@app-1' ELSE '' END",
    "lease_expires_at": "CASE WHEN g %% 5 = 3 THEN now() + interval '30 days' END",
    "parent_id": f"CASE WHEN g %% 5 <> 4 AND g - g %% 5 + 4 <= %(n)s THEN {_OPEN_PARENT} END",
    "root_id": f"CASE WHEN g %% 5 <> 4 AND g - g %% 5 + 4 <= %(n)s THEN {_OPEN_PARENT} END",
    "depth": "CASE WHEN g %% 5 <> 4 AND g - g %% 5 + 4 <= %(n)s THEN 1 ELSE 0 END",
    "pending_children": "CASE WHEN g %% 5 = 4 THEN 4 ELSE 0 END",
}
#: Finished in the last 24 hours (the dashboard's charts read these): durations vary by type, one in 20 failed.
RECENT = {
    "created_at": "now() - age - (t * 0.5 + (g %% 50) / 10.0 + 1) * interval '1 second'",
    "run_at": "now() - age - (t * 0.5 + (g %% 50) / 10.0 + 1) * interval '1 second'",
    "started_at": "now() - age - (t * 0.5 + (g %% 50) / 10.0) * interval '1 second'",
    "step_started_at": "now() - age - interval '10 milliseconds'",
    "finished_at": "now() - age",
    "status": "CASE WHEN g %% 20 = 0 THEN 'failed' ELSE 'done' END",
}
#: Runs of the seeded schedules: one a minute, round robin over them, going back as far as the rows reach.
SCHEDULED = {"schedule_id": "%(first_schedule)s + g %% %(schedules)s", "tick_at": "now() - age"}
#: Schedules seeded, and how many runs they have between them.
SCHEDULES, SCHEDULED_RUNS = 40, 50_000

CHILD = {
    "parent_id": "md5('root' || (1 + g %% %(trees)s))::uuid", "root_id": "md5('root' || (1 + g %% %(trees)s))::uuid",
    "depth": "1", "spawned_in": "1", "position": "g / %(trees)s",
}

LEASE_SQL = """
    INSERT INTO {lease} (procedure_id, token, worker, claimed_at, expires_at, released_at, outcome)
    SELECT id, 1, 'worker-' || (abs(hashtext(id::text)) %% 8) || '@app-' || (abs(hashtext(id::text)) %% 3),
           started_at, started_at + interval '30 seconds',
           CASE WHEN status = 'running' THEN NULL ELSE COALESCE(finished_at, started_at + interval '3 seconds') END,
           CASE WHEN status = 'running' THEN '' WHEN status = 'done' THEN 'completed' ELSE 'failed' END
    FROM {run} WHERE started_at IS NOT NULL AND type_name = ANY(%(types)s)
"""

#: Step attempts of the trees' members (the procedure page's tree timeline reads them): a done step for
#: each, and before it a failed attempt for every third child.
STEP_SQL = """
    INSERT INTO {step} (procedure_id, index, name, attempt, status, lease_token, started_at, finished_at, error, state)
    SELECT r.id, 0, 'call_upstream', a.n, CASE WHEN a.n = 2 OR r.depth = 0 OR abs(hashtext(r.id::text)) %% 3 > 0
                                              THEN 'done' ELSE 'failed' END, 1,
           r.started_at + (a.n - 1) * interval '1 second', r.started_at + (a.n - 1) * interval '1 second'
           + interval '500 milliseconds', '', NULL
    FROM {run} AS r
    LEFT JOIN (SELECT DISTINCT root_id FROM {run} WHERE root_id IS NOT NULL) AS tree ON tree.root_id = r.id
    CROSS JOIN (VALUES (1), (2)) AS a(n)
    WHERE (r.depth = 1 OR tree.root_id IS NOT NULL)
      AND r.started_at IS NOT NULL AND (a.n = 1 OR (r.depth = 1 AND abs(hashtext(r.id::text)) %% 3 = 0))
"""
# The roots are joined, not tested with ``r.id IN (...) OR ...``: beside ten million rows their set outgrew
# work_mem, and PostgreSQL then ran the IN as a plain subplan, a scan of 380,000 roots for each of ten million
# rows (a seed that had not finished after 16 minutes; the join takes seconds).


def insert(cursor: Any, table: str, columns: list[str], kind: str, n: int, age: str, *overrides: dict[str, str],
           trees: int = 1, first_schedule: int = 0) -> None:
    exprs = dict(BASE)
    for override in overrides:
        exprs.update(override)
    weighted = [i + 1 for i, (_, _, w) in enumerate(TYPES) for _ in range(w)]
    sql = f"""
        INSERT INTO {table} ({", ".join(columns)})
        SELECT {", ".join(exprs[c] for c in columns)}
        FROM (SELECT g, (%(weighted)s::int[])[(1 + (g * 31) %% %(nw)s)::int] AS t, {age} AS age
              FROM generate_series(1::bigint, %(n)s::bigint) AS g) AS s
    """
    cursor.execute(sql, {"kind": kind, "n": n, "types": [t for t, _, _ in TYPES], "queues": [q for _, q, _ in TYPES],
                         "weighted": weighted, "nw": len(weighted), "errors": ERRORS, "trees": trees,
                         "first_schedule": first_schedule, "schedules": SCHEDULES})


def seed_schedules() -> int:
    """``SCHEDULES`` schedules with some metrics, every fifth paused; returns the lowest id."""
    from datetime import timedelta

    from django_procedures.models import Schedule

    rows = Schedule._writer.bulk_create([
        Schedule(name=f"{TYPES[i % len(TYPES)][0].split('.')[0]}-sched-{i:02}", procedure=TYPES[i % len(TYPES)][0],
                 period=timedelta(minutes=1 + i % 30), enabled=i % 5 != 0, disabled_reason="" if i % 5 else "paused",
                 runs=1000 + i, failures=i % 7, skips=i % 3, last_drift_ms=i * 37)
        for i in range(SCHEDULES)])
    return min(s.pk for s in rows)


LONE_STEP_SQL = """
    INSERT INTO {step} (procedure_id, index, name, attempt, status, lease_token, started_at, finished_at, error, state)
    SELECT id, 0, CASE WHEN status = 'done' THEN 'run' ELSE 'call_upstream' END, 1,
           CASE WHEN status = 'done' THEN 'done' ELSE 'failed' END, 1, started_at,
           COALESCE(finished_at, started_at + interval '1 second'), error,
           CASE WHEN status = 'done' THEN '{{}}'::jsonb END
    FROM {run} WHERE started_at IS NOT NULL AND status NOT IN ('running', 'ready', 'retrying', 'waiting')
      AND type_name = ANY(%(types)s) AND depth = 0
      AND NOT EXISTS (SELECT 1 FROM {run} AS c WHERE c.root_id = {run}.id)
"""


@contextmanager
def indexes_built_afterwards(cursor: Any, tables: list[str], say: Callable[[str], Any]) -> Iterator[None]:
    """Drop the indexes of ``tables`` that back no constraint, and build them again at the end.

    Building an index once over ten million rows is several times faster than
    keeping fourteen of them up to date row by row.
    """
    cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = ANY(%s) "
                   "AND indexname NOT IN (SELECT conname FROM pg_constraint)", [tables])
    saved = cursor.fetchall()
    for name, _ in saved:
        cursor.execute(f'DROP INDEX "{name}"')
    yield
    started = time.perf_counter()
    cursor.execute("SET maintenance_work_mem = '256MB'")
    for _, definition in saved:
        cursor.execute(definition)
    say(f"  built {len(saved)} indexes in {time.perf_counter() - started:.1f}s")


def seed(total: int, say: Callable[[str], Any] = print) -> None:
    """``total`` procedures (see the module's docstring), a Lease per started one and a Step per finished one."""
    from django.db import connection

    from django_procedures.models import Lease, ProcedureRun, Step

    with connection.cursor() as cursor:
        tables = [ProcedureRun._meta.db_table, Lease._meta.db_table, Step._meta.db_table]
        with indexes_built_afterwards(cursor, tables, say):
            _seed(total, say)
        started = time.perf_counter()
        cursor.execute("VACUUM ANALYZE")
        say(f"  VACUUM ANALYZE in {time.perf_counter() - started:.1f}s")
        cursor.execute(f"SELECT status, count(*) FROM {tables[0]} GROUP BY 1 ORDER BY 2 DESC")
        say("  rows by status: " + ", ".join(f"{s}={n:,}" for s, n in cursor.fetchall()))
    count_finished(say)


def count_finished(say: Callable[[str], Any] = print) -> None:
    """Count the last day's finished minutes as running workers would have (the dashboard reads them)."""
    from datetime import timedelta

    from django.utils import timezone

    from django_procedures.store.activity import begin_counting, roll_up

    started, now = time.perf_counter(), timezone.now()
    begin_counting(now - timedelta(hours=25))
    roll_up(now, catch_up=timedelta(days=2))
    say(f"  counted the last day's finished minutes in {time.perf_counter() - started:.1f}s")


def _seed(total: int, say: Callable[[str], Any]) -> None:
    from django.db import connection

    from django_procedures.models import Lease, ProcedureRun, Step

    table, lease = ProcedureRun._meta.db_table, Lease._meta.db_table
    trees, per_tree = total // 25, 10  # 4% of rows are roots of trees of 10 children: 40% are children
    children = trees * per_tree
    unfinished, failed = min(3_000, total // 100), total // 16
    recent = total // 10
    scheduled = min(SCHEDULED_RUNS, total // 20)
    roots = total - children - unfinished - failed - scheduled - recent
    first_schedule = seed_schedules()
    with connection.cursor() as cursor:
        columns = [c.name for c in connection.introspection.get_table_description(cursor, table)]
        unknown = sorted(set(columns) - set(BASE))
        if unknown:
            sys.exit(f"columns this seed does not know: {', '.join(unknown)}; add them to BASE")
        cursor.execute("SELECT setseed(0.42)")
        spread = "random() * interval '400 days'"
        for label, args, kw in [
            ("roots, done, 0-400 days old (the first are tree roots)", ("root", roots, spread), {}),
            ("children of those trees, done", ("child", children, spread, CHILD), {"trees": trees}),
            ("failed / rolled back / cancelled", ("failed", failed, spread, FAILED), {}),
            ("finished in the last 24 hours", ("recent", recent, "random() * interval '24 hours'", RECENT), {}),
            ("unfinished now: ready, retrying, running, waiting", ("open", unfinished,
                                                                   "random() * interval '2 days'", UNFINISHED), {}),
            (f"runs of {SCHEDULES} schedules, done, one a minute", ("sched", scheduled, "g * interval '1 minute'",
                                                                   SCHEDULED), {"first_schedule": first_schedule}),
        ]:
            started = time.perf_counter()
            insert(cursor, table, columns, *args, **kw)
            say(f"  seeded {args[1]:>9,} {label} in {time.perf_counter() - started:.1f}s")
        started = time.perf_counter()
        seeded_types = {"types": [t for t, _, _ in TYPES]}  # not the benchmark's own procedures
        cursor.execute(f"ANALYZE {table}")  # the step seeds' anti-join is a hash join only with statistics
        cursor.execute(LEASE_SQL.format(lease=lease, run=table), seeded_types)
        say(f"  seeded {cursor.rowcount:>9,} leases in {time.perf_counter() - started:.1f}s")
        started = time.perf_counter()
        cursor.execute(STEP_SQL.format(step=Step._meta.db_table, run=table), {})
        say(f"  seeded {cursor.rowcount:>9,} step attempts of the trees' members in "
            f"{time.perf_counter() - started:.1f}s")
        started = time.perf_counter()
        cursor.execute(LONE_STEP_SQL.format(step=Step._meta.db_table, run=table), seeded_types)
        say(f"  seeded {cursor.rowcount:>9,} steps of the other finished procedures in "
            f"{time.perf_counter() - started:.1f}s")

