"""What the plan scripts share: a scratch database they drop and re-create, and EXPLAIN of the first statement a
store function sends (``claim_plan``, ``admin_plans``, ``cli_plans``)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql as pgsql

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


# --------------------------------------------------------------------------- capturing and explaining


class _Explained(Exception):
    """Raised once the EXPLAIN has run, so the surrounding atomic block rolls everything back."""


@dataclass
class Plan:
    sql: str
    lines: list[str]


def explain_first_statement(fn: Callable[[], Any], table: str) -> Plan:
    """Call ``fn``; EXPLAIN (ANALYZE, BUFFERS) its first SELECT/WITH statement on ``table``; roll back.

    The store sends its hot statements (claim, due times, completion) on a raw psycopg cursor
    (``store.db.bound_cursor``), past Django's execute wrappers: those are caught there too.
    """
    from django.db import connection, transaction

    from django_procedures.store import db

    captured: list[Plan] = []

    def wanted(sql: str) -> bool:
        words = sql.split(None, 1)
        return not captured and bool(words) and words[0].upper() in ("SELECT", "WITH") and table in sql

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        if many or not wanted(sql):
            return execute(sql, params, many, context)
        execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params, many, context)
        lines = [row[0] for row in context["cursor"].fetchall()]
        captured.append(Plan(connection.ops.compose_sql(sql, params), lines))  # type: ignore[attr-defined]
        raise _Explained

    bound_execute = db._BoundCursor.execute

    def bound(self: Any, sql: str, params: Any) -> None:
        if not wanted(sql):
            return bound_execute(self, sql, params)
        self._cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params, prepare=False)
        lines = [row[0] for row in self._cursor.fetchall()]
        captured.append(Plan(f"{sql}\n-- parameters (bound on the server): {params!r}", lines))
        raise _Explained

    db._BoundCursor.execute = bound  # type: ignore[method-assign]
    try:
        with connection.execute_wrapper(wrapper):
            try:
                with transaction.atomic():
                    fn()
            except _Explained:
                pass
    finally:
        db._BoundCursor.execute = bound_execute  # type: ignore[method-assign]
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
