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
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql as pgsql

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

PROTECTED_DATABASES = {"postgres", "template0", "template1"}


# --------------------------------------------------------------------------- database lifecycle


def database_settings() -> dict[str, str]:
    url = os.environ.get("DATABASE_URL")
    if not url:
        sys.exit("set DATABASE_URL=postgres://user@host:port/name (the database is dropped and re-created)")
    from django.conf import settings

    db = settings.DATABASES["default"]  # exactly what Django will connect to
    if db["ENGINE"] != "django.db.backends.postgresql":
        sys.exit(f"DATABASE_URL must point at PostgreSQL; got {url!r}")
    if db["NAME"] in PROTECTED_DATABASES:
        sys.exit(f"refusing to drop and re-create the database {db['NAME']!r}; name a scratch database")
    return db


def maintenance(db: dict[str, str], *statements: pgsql.Composable) -> None:
    """Run ``statements`` on the server's ``postgres`` database (outside any transaction)."""
    with psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], password=db["PASSWORD"] or None,
                         dbname="postgres", autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def recreate_database(db: dict[str, str]) -> None:
    name = pgsql.Identifier(db["NAME"])
    maintenance(db, pgsql.SQL("DROP DATABASE IF EXISTS {}").format(name),
                pgsql.SQL("CREATE DATABASE {}").format(name))


def drop_database(db: dict[str, str]) -> None:
    from django.db import connections

    connections.close_all()
    maintenance(db, pgsql.SQL("DROP DATABASE IF EXISTS {}").format(pgsql.Identifier(db["NAME"])))


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


# --------------------------------------------------------------------------- capturing and explaining


class _Explained(Exception):
    """Raised once the EXPLAIN has run, so the surrounding atomic block rolls everything back."""


@dataclass
class Plan:
    sql: str
    lines: list[str]


def explain_first_statement(fn: Callable[[], Any], table: str) -> Plan:
    """Call ``fn``; EXPLAIN (ANALYZE, BUFFERS) its first SELECT/WITH statement on ``table``; roll back."""
    from django.db import connection, transaction

    captured: list[Plan] = []

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        words = sql.split(None, 1)
        if captured or many or not words or words[0].upper() not in ("SELECT", "WITH") or table not in sql:
            return execute(sql, params, many, context)
        execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params, many, context)
        lines = [row[0] for row in context["cursor"].fetchall()]
        captured.append(Plan(connection.ops.compose_sql(sql, params), lines))
        raise _Explained

    with connection.execute_wrapper(wrapper):
        try:
            with transaction.atomic():
                fn()
        except _Explained:
            pass
    if not captured:
        raise RuntimeError(f"{fn!r} issued no SELECT on {table}")
    return captured[0]


_NODE = re.compile(
    r"^\s*(?:->\s+)?(?P<label>[A-Z][^(]*?)\s+\(cost=[^)]*\)\s+"
    r"\((?:actual (?:time=\S+ )?rows=(?P<rows>[\d.]+) loops=(?P<loops>\d+)|never executed)\)"
)
_SCAN = re.compile(
    r"^(?P<kind>(?:Parallel )?(?:Seq Scan|Index Only Scan|Index Scan|Bitmap Heap Scan|Bitmap Index Scan))"
    r"(?: Backward)?(?: using (?P<index>\S+))? on (?P<rel>\S+)"
)
_REMOVED = re.compile(r"^\s*Rows Removed by (?:Filter|Index Recheck): (?P<n>[\d.]+)")
_EXECUTION = re.compile(r"^\s*Execution Time: (?P<ms>[\d.]+) ms")


@dataclass
class Scan:
    kind: str
    index: str | None
    rel: str
    rows: float
    loops: int
    removed: float = 0.0

    @property
    def examined(self) -> float:
        return (self.rows + self.removed) * self.loops

    @property
    def reads_heap(self) -> bool:
        return "Bitmap Index Scan" not in self.kind


@dataclass
class Summary:
    scans: list[Scan] = field(default_factory=list)
    execution_ms: float | None = None


def summarize(lines: list[str]) -> Summary:
    summary = Summary()
    current: Scan | None = None
    for line in lines:
        node = _NODE.match(line)
        if node:
            current = None
            scan = _SCAN.match(node["label"])
            if scan:
                kind, index, rel = scan["kind"], scan["index"], scan["rel"]
                if kind.endswith("Bitmap Index Scan"):
                    index, rel = rel, ""
                current = Scan(kind, index, rel, float(node["rows"] or 0), int(node["loops"] or 0))
                summary.scans.append(current)
            continue
        removed = _REMOVED.match(line)
        if removed and current is not None:
            current.removed += float(removed["n"])
        executed = _EXECUTION.match(line)
        if executed:
            summary.execution_ms = float(executed["ms"])
    return summary


def report(title: str, plan: Plan, table: str, partial: set[str], show_sql: bool) -> tuple[str, bool]:
    print(f"\n{'=' * 100}\n{title}\n{'=' * 100}")
    if show_sql:
        print("-- statement as issued by the store:")
        print("\n".join(line.rstrip() for line in plan.sql.strip().splitlines()))
        print("-- plan:")
    for line in plan.lines:
        print(line)
    summary = summarize(plan.lines)
    run_scans = [s for s in summary.scans if s.rel == table and s.reads_heap]
    used = sorted({s.index for s in summary.scans if s.index})
    used_partial = [i for i in used if i in partial]
    seq = [s for s in run_scans if "Seq Scan" in s.kind]
    examined = sum(s.examined for s in run_scans)
    ok = bool(used_partial) and not seq
    print("-- summary:")
    print(f"   index scan on a partial index: {'yes (' + ', '.join(used_partial) + ')' if used_partial else 'NO'}")
    print(f"   all indexes used:              {', '.join(used) or 'none'}")
    print(f"   sequential scan of {table}: {'YES' if seq else 'no'}")
    for s in run_scans:
        name = f"{s.kind} using {s.index}" if s.index else s.kind
        print(f"     {name}: {s.rows * s.loops:,.0f} rows returned, {s.removed * s.loops:,.0f} removed by filter")
    print(f"   rows examined on {table}: {examined:,.0f}")
    ms = f"{summary.execution_ms:.3f} ms" if summary.execution_ms is not None else "?"
    print(f"   execution time: {ms}")
    print(f"   verdict: {'OK' if ok else 'NEEDS AN INDEX'}")
    return f"{title.split(' ', 1)[0]:<5} {'ok ' if ok else 'BAD'}  {ms:>12}  {examined:>11,.0f} rows  " \
           f"{', '.join(used_partial) or ('SEQ SCAN' if seq else ', '.join(used) or '-')}", ok


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
