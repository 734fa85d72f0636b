"""Query plans of the hot worker queries against a table of 1,000,000 finished procedures.

Run from the repository root::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/procedures_plan .venv/bin/python -m benchmarks.claim_plan

The script drops and creates the database named by ``DATABASE_URL``, migrates
it, seeds finished, due, future and running ``ProcedureRun`` rows with
``INSERT ... SELECT generate_series``, runs ``VACUUM ANALYZE`` and prints
``EXPLAIN (ANALYZE, BUFFERS)`` with a short summary for:

(a) the claim (``_PG_CLAIM``, LIMIT 10) without and with a queue filter,
(b) ``next_due``, (c) the select of ``sweep_expired``, (d) ``unknown_types``.

Each statement is captured from the real store function while it runs (a
Django execute wrapper), so it is exactly the SQL the store issues. The
wrapper runs it under ``EXPLAIN (ANALYZE, BUFFERS)`` instead and then aborts
the surrounding transaction, so nothing is claimed, swept or changed for real.
The database is dropped at the end unless ``--keep`` is given.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.explain import database_settings, drop_database, explain_first_statement, recreate_database, report

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

#: Registered procedure types of the benchmark worker: (type name, queue, weight).
REGISTERED = [
    ("emails.SendWelcomeEmail", "emails", 5),
    ("emails.SendReceipt", "emails", 4),
    ("billing.ChargeInvoice", "billing", 3),
    ("billing.RefundPayment", "billing", 1),
    ("exports.BuildMonthlyReport", "exports", 1),
    ("accounts.CloseAccount", "default", 1),
    ("shipping.BookCourier", "default", 2),
    ("crm.SyncContact", "default", 3),
]
#: A type still present among ready rows that no worker registers any more (for ``unknown_types``).
UNREGISTERED = ("legacy.ImportLedger", "default", 1)
#: A queue some worker serves that has nothing due: the claim's worst case.
EMPTY_QUEUE = "reports-eu"




# --------------------------------------------------------------------------- seeding

# One expression per column; ``s`` is the per-row subquery built in ``insert_runs``.
_COLUMN_DEFAULTS = {
    "id": "gen_random_uuid()",
    "type_name": "(%(types)s::text[])[s.k]",
    "queue": "(%(queues)s::text[])[s.k]",
    "state": "jsonb_build_object('order_id', s.g, 'customer', 'cus_' || (s.g::bigint * 7919 %% 100003))",
    "status": "'ready'",
    "step": "0",
    "step_name": "'start'",
    "step_started_at": "NULL",
    "attempt": "1",
    "failures": "0",
    "lost": "0",
    "in_unsafe_step": "false",
    "parent_id": "NULL",
    "root_id": "NULL",
    "priority": "s.priority",
    "key": "NULL",
    "run_at": "s.run_at",
    "lease_token": "0",
    "lease_owner": "''",
    "lease_expires_at": "NULL",
    "output": "NULL",
    "error": "''",
    "traceback": "''",
    "failed_step": "''",
    "failure_can_retry": "false",
    "created_at": "LEAST(s.run_at, now())",
    "started_at": "NULL",
    "finished_at": "NULL",
    "retried_at": "NULL",
    "retried_by": "''",
    "manual_retries": "0",
    "depth": "0",
    "pending_children": "0",
    "suspension": "0",
    "spawned_in": "0",
    "position": "0",
    "failure_handled": "false",
    "lock_keys": "'[]'::jsonb",
    "keys_held": "false",
    "waiting_for_keys": "false",
    "in_rollback": "false",
    "rollback_error": "''",
    "schedule_id": "NULL",
    "tick_at": "NULL",
    "awaited": "false",
    "trace_context": "NULL",
}

_FINISHED = {
    "status": "CASE WHEN s.failed THEN 'failed' ELSE 'done' END",
    "step": "CASE WHEN s.failed THEN 1 ELSE 3 END",
    "step_name": "CASE WHEN s.failed THEN 'call_upstream' ELSE '' END",
    "step_started_at": "s.run_at + interval '2 seconds'",
    "attempt": "CASE WHEN s.failed THEN 3 ELSE 1 END",
    "failures": "CASE WHEN s.failed THEN 3 ELSE 0 END",
    "key": "CASE WHEN s.g %% 5 = 0 THEN 'idem-' || s.g END",
    "lease_token": "CASE WHEN s.failed THEN 3 ELSE 1 END",
    "output": "CASE WHEN s.failed THEN NULL ELSE jsonb_build_object('ok', true, 'ms', s.g %% 900) END",
    "error": "CASE WHEN s.failed THEN 'TimeoutError: upstream did not answer within 30s' ELSE '' END",
    "traceback": "CASE WHEN s.failed THEN 'Traceback (most recent call last):\n  ...\nTimeoutError' ELSE '' END",
    "failed_step": "CASE WHEN s.failed THEN 'call_upstream' ELSE '' END",
    "failure_can_retry": "s.failed",
    "created_at": "s.run_at",
    "started_at": "s.run_at + interval '1 second'",
    "finished_at": "s.run_at + interval '4 seconds'",
}

_RUNNING = {
    "status": "'running'",
    "step": "1",
    "step_name": "'call_upstream'",
    "step_started_at": "now() - interval '10 seconds'",
    "lease_token": "1",
    "lease_owner": "'worker-' || (s.g %% 8) || '@app-1'",
    # The first %(expired)s rows hold a lease that ran out a minute ago: what the sweep finds.
    "lease_expires_at": "CASE WHEN s.g <= %(expired)s THEN now() - interval '1 minute'"
                        " ELSE now() + interval '30 seconds' END",
    "started_at": "s.run_at + interval '1 second'",
}


def insert_runs(cursor: Any, table: str, columns: list[str], n: int, overrides: dict[str, str], run_at: str,
                types: list[tuple[str, str, int]], **params: Any) -> None:
    weighted = [(name, queue) for name, queue, weight in types for _ in range(weight)]
    exprs = {**_COLUMN_DEFAULTS, **overrides}
    statement = f"""
        INSERT INTO {table} ({", ".join(columns)})
        SELECT {", ".join(exprs[c] for c in columns)}
        FROM (
            SELECT g, 1 + floor(random() * %(nk)s)::int AS k, random() < 0.06 AS failed,
                   CASE WHEN random() < 0.1 THEN 10 ELSE 0 END AS priority, {run_at} AS run_at
            FROM generate_series(1, %(n)s) AS g
        ) AS s
    """
    cursor.execute(statement, {"n": n, "nk": len(weighted), "types": [t for t, _ in weighted],
                               "queues": [q for _, q in weighted], **params})


def seed(finished: int, due: int, future: int, running: int, expired: int) -> None:
    from django.db import connection

    from django_procedures.models import ProcedureRun

    table = ProcedureRun._meta.db_table
    with connection.cursor() as cursor:
        described = [c.name for c in connection.introspection.get_table_description(cursor, table)]
        columns = [c for c in described if c in _COLUMN_DEFAULTS]
        unknown = sorted(set(described) - set(_COLUMN_DEFAULTS))
        if unknown:
            print(f"note: left to their database defaults: {', '.join(unknown)}")
        cursor.execute("SELECT setseed(0.42)")
        kinds = [
            ("finished (done/failed), run 30-395 days ago", finished, _FINISHED,
             "now() - interval '30 days' - random() * interval '365 days'", REGISTERED),
            ("ready, due now", due, {}, "now() - random() * interval '10 minutes'", [*REGISTERED, UNREGISTERED]),
            ("ready, due in 1 hour to 30 days", future, {},
             "now() + interval '1 hour' + random() * interval '30 days'", [*REGISTERED, UNREGISTERED]),
            (f"running ({expired} with an expired lease)", running, _RUNNING,
             "now() - interval '1 minute'", REGISTERED),
        ]
        for label, n, overrides, run_at, types in kinds:
            started = time.perf_counter()
            insert_runs(cursor, table, columns, n, overrides, run_at, types, expired=expired)
            print(f"  seeded {n:>9,} {label} in {time.perf_counter() - started:.1f}s")
        started = time.perf_counter()
        cursor.execute("VACUUM ANALYZE")  # Django's connection is in autocommit here
        print(f"  VACUUM ANALYZE in {time.perf_counter() - started:.1f}s")

        cursor.execute(f"SELECT status, count(*) FROM {table} GROUP BY status ORDER BY 2 DESC")
        print("  rows by status: " + ", ".join(f"{s}={n:,}" for s, n in cursor.fetchall()))
        cursor.execute("""
            SELECT c.relname, pg_size_pretty(pg_relation_size(c.oid)), c.reltuples::bigint
            FROM pg_class c
            WHERE c.oid = %(t)s::regclass OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = %(t)s::regclass)
            ORDER BY c.relkind DESC, c.relname
        """, {"t": table})
        for name, size, tuples in cursor.fetchall():
            print(f"  {name:<48} {size:>10} {max(tuples, 0):>11,} tuples")



# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--finished", type=int, default=1_000_000, help="finished rows (default 1,000,000)")
    parser.add_argument("--due", type=int, default=1_000, help="ready rows due now (default 1,000)")
    parser.add_argument("--future", type=int, default=1_000, help="ready rows due later (default 1,000)")
    parser.add_argument("--running", type=int, default=200, help="running rows (default 200)")
    parser.add_argument("--expired", type=int, default=20, help="of which with an expired lease (default 20)")
    parser.add_argument("--no-sql", action="store_true", help="do not print the statements, only the plans")
    args = parser.parse_args(argv)

    db = database_settings()
    print(f"database {db['NAME']} on {db['HOST']}:{db['PORT']}: drop if exists, create")
    recreate_database(db)
    try:
        import django
        from django.core.management import call_command

        django.setup()
        started = time.perf_counter()
        call_command("migrate", interactive=False, verbosity=0)
        print(f"migrated in {time.perf_counter() - started:.1f}s")

        from django.db import connection

        from django_procedures.models import ProcedureRun
        from django_procedures.store.claim import claim, unknown_types
        from django_procedures.store.due import next_due
        from django_procedures.store.leases import sweep_expired

        table = ProcedureRun._meta.db_table
        partial = {i.name for i in ProcedureRun._meta.indexes if i.condition is not None}
        connection.ensure_connection()
        print(f"server: PostgreSQL {connection.connection.info.parameter_status('server_version')}; "
              f"partial indexes on {table}: {', '.join(sorted(partial))}")
        print("seeding:")
        seed(args.finished, args.due, args.future, args.running, args.expired)

        types = [name for name, _, _ in REGISTERED]
        cases: list[tuple[str, Callable[[], Any]]] = [
            ("(a0) claim's first statement: the lock-key pass (procedures taking keys for the first time)",
             lambda: claim("bench-worker", type_names=types, limit=10, lease_seconds=30)),
            ("(a1) claim, LIMIT 10, all registered types, no queue filter",
             lambda: claim("bench-worker", type_names=types, limit=10, lease_seconds=30, keyed=False)),
            ("(a2) claim, LIMIT 10, queues=['emails']",
             lambda: claim("bench-worker", type_names=types, queues=["emails"], limit=10, lease_seconds=30,
                           keyed=False)),
            (f"(a3) claim, LIMIT 10, queues=[{EMPTY_QUEUE!r}] (nothing due there: the scan cannot stop early)",
             lambda: claim("bench-worker", type_names=types, queues=[EMPTY_QUEUE], limit=10, lease_seconds=30,
                           keyed=False)),
            ("(b1) next_due, all registered types", lambda: next_due(type_names=types)),
            ("(b2) next_due, queues=['emails']", lambda: next_due(type_names=types, queues=["emails"])),
            ("(c)  sweep_expired(limit=100): its SELECT ... FOR UPDATE SKIP LOCKED", lambda: sweep_expired(100)),
            ("(d)  unknown_types(registered types)", lambda: unknown_types(types)),
        ]
        results = []
        for title, fn in cases:
            explain_first_statement(fn, table)  # warm-up run, discarded
            results.append(report(title, explain_first_statement(fn, table), table, partial, not args.no_sql))

        print(f"\n{'=' * 100}\nsummary ({args.finished:,} finished rows; execution time; rows examined on {table})")
        for line, _ in results:
            print("  " + line)
        return 0 if all(ok for _, ok in results) else 1
    finally:
        if args.keep:
            print(f"\nkept database {db['NAME']}")
        else:
            drop_database(db)
            print(f"\ndropped database {db['NAME']}")


if __name__ == "__main__":
    sys.exit(main())
