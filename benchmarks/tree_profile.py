"""Where a tree's time goes: trees and flat no-ops of the same size, drained side by side, with counts.

    python -m benchmarks.tree_profile [--shapes 200x20,20x200] [--runs 1] [--threads 4]

For each shape (parents x children) and for as many flat no-op procedures,
on a fresh database with 2 burst workers, it prints throughput and figures
that do not depend on the machine's load: commits (``pg_stat_database``) and
statements (counted in the workers, :mod:`benchmarks.statements`) per
procedure, and the statements of a tree by kind. It also samples what the
database sessions are doing (``pg_stat_activity`` every 10 ms: row-lock
waits, WAL flushes, running, idle in a transaction) and reads back from the
rows how long a parent waits between its last child finishing and its
re-claim. Nothing is appended to ``benchmarks/RESULTS.md``: this is a profile,
not a recorded figure.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.harness import Databases, Server, close_connection, finished_span, median, percentile
from benchmarks.run import DEFAULT_THREADS, add_database_url, machine, standalone
from benchmarks.statements import read

_QUALIFIED = re.compile(r'"django_procedures_\w+"\.("\w+")')


class Sessions(threading.Thread):
    """Samples what the sessions of one database are doing until stopped."""

    def __init__(self, server: Server, dbname: str, interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.server, self.dbname, self.interval = server, dbname, interval
        self.states: Counter[str] = Counter()
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        with self.server.connect() as conn:
            while not self._stop_event.wait(self.interval):
                rows = conn.execute(
                    "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
                    "WHERE datname = %s AND backend_type = 'client backend' AND query NOT ILIKE 'LISTEN %%'",
                    [self.dbname]).fetchall()
                self.samples += 1
                for state, kind, event in rows:
                    self.states[classify(state, kind, event)] += 1

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def classify(state: str | None, kind: str | None, event: str | None) -> str:
    if state == "idle":
        return "idle (no transaction)"
    if state and state.startswith("idle in transaction"):
        return "idle in transaction (the worker's Python)"
    if kind is None:
        return "running in PostgreSQL"
    if kind == "Lock" and event in ("transactionid", "tuple"):
        return "waiting for a row lock"
    if kind == "Lock":
        return f"waiting for a lock ({event})"
    if kind == "IO" and event and event.startswith("WAL"):
        return "WAL flush (commit)"
    if kind == "LWLock" and event in ("WALWrite", "WALInsert"):
        return "WAL flush (commit)"
    if kind == "Client":
        return "sending to the client"
    return f"{kind}/{event}"


def drain(ctx: dict[str, Any], label: str, parents: int, children: int) -> dict[str, Any]:
    """One drain: ``parents`` x ``children`` trees, or (``children`` == 0) ``parents`` flat no-ops."""
    from django.db.models import Max

    from benchmarks.common import now, submit
    from benchmarks.procedures import Noop, TreeParent
    from django_procedures.models import Lease, ProcedureRun

    server, databases = ctx["server"], ctx["databases"]
    total = parents * (children + 1) if children else parents
    with databases.fresh(label) as db:
        since = now()
        if children:
            submit(TreeParent, [{"fanout": children}] * parents)
        else:
            submit(Noop, [{}] * parents)
        close_connection()
        server.wait_disconnected(db)
        before = server.xact_commit(db)
        logs = Path(tempfile.mkdtemp(prefix="procedures-statements-"))
        os.environ["BENCH_STATEMENT_LOG"] = str(logs)
        from benchmarks.workers import Workers

        sessions = Sessions(server, db)
        sessions.start()
        try:
            with Workers(server.url(db), ctx["log_dir"]) as pool:
                started = pool.start(2, concurrency=ctx["threads"], burst=True)
                pool.wait_exit(started, 900)
        finally:
            del os.environ["BENCH_STATEMENT_LOG"]
            sessions.stop()
        server.wait_disconnected(db)
        commits = server.xact_commit(db) - before
        count, _first, last = finished_span(since)
        assert count == total, (count, total)
        statements = read(logs)
        result: dict[str, Any] = {
            "rate": total / (last - min(w.started for w in started)), "total": total,
            "commits": commits, "statements": statements, "sessions": sessions.states,
            "samples": sessions.samples,
        }
        if children:
            # A parent's wait between its last child finishing and its re-claim (its second lease).
            last_child = dict(ProcedureRun.objects.filter(parent_id__isnull=False).values_list("parent_id")
                              .order_by().annotate(at=Max("finished_at")))
            reclaimed = dict(Lease.objects.filter(procedure_id__in=list(last_child), token=2)
                             .values_list("procedure_id", "claimed_at"))
            waits = [(reclaimed[p] - at).total_seconds() * 1000 for p, at in last_child.items() if p in reclaimed]
            result["resume_ms"] = waits
            spans = list(ProcedureRun.objects.filter(parent_id__isnull=True).values_list("started_at", "finished_at"))
            result["parent_life_s"] = [(b - a).total_seconds() for a, b in spans]
        return result


def report(name: str, r: dict[str, Any], flat_rate: float | None) -> list[str]:
    lines = [f"{name}: {r['rate']:,.0f} procedures/s"
             + (f" = {r['rate'] / flat_rate:.0%} of flat" if flat_rate else "")]
    n, statements = r["total"], r["statements"]
    sent = sum(v for k, v in statements.items() if not k.startswith("("))  # "(BEGIN)", "(COMMIT)": psycopg's
    lines.append(f"  commits/procedure {r['commits'] / n:.2f}; statements/procedure {sent / n:.2f}; "
                 f"round trips/procedure {sum(statements.values()) / n:.2f} (with BEGIN and COMMIT)")
    busy = sum(v for k, v in r["sessions"].items() if not k.startswith("idle (no"))
    if busy:
        lines.append("  database sessions (share of busy samples): " + "; ".join(
            f"{k} {v / busy:.0%}" for k, v in r["sessions"].most_common() if not k.startswith("idle (no")))
    if r.get("resume_ms"):
        w = r["resume_ms"]
        lines.append(f"  parent re-claim after its last child finished: p50 {percentile(w, 50):.1f} ms, "
                     f"p90 {percentile(w, 90):.1f} ms, max {max(w):.1f} ms; parent life median "
                     f"{median(r['parent_life_s']):.2f} s")
    lines.append("  statements per procedure by kind:")
    for sql, count in statements.most_common(14):
        if count / n >= 0.005:
            short = _QUALIFIED.sub(r"\1", sql)
            lines.append(f"    {count / n:6.2f}  {short[:120]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tree_profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="200x20,20x200")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    add_database_url(parser)
    args = parser.parse_args(argv)
    server, prefix = standalone(args.database_url)
    ctx = {"server": server, "databases": Databases(server, prefix), "threads": args.threads,
           "log_dir": Path(tempfile.mkdtemp(prefix="procedures-bench-"))}
    print(f"tree profile: {machine()}", flush=True)
    try:
        for run in range(args.runs):
            for shape in args.shapes.split(","):
                parents, children = (int(x) for x in shape.split("x"))
                total = parents * (children + 1)
                flat = drain(ctx, f"flat_{run}_{shape}", total, 0)
                tree = drain(ctx, f"tree_{run}_{shape}", parents, children)
                print("\n".join(report(f"run {run + 1}: flat {total:,} no-ops", flat, None)), flush=True)
                print("\n".join(report(f"run {run + 1}: trees {shape}", tree, flat["rate"])), flush=True)
    finally:
        ctx["databases"].drop_all()
    print(f"done: {machine()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
