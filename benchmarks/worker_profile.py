"""Where one worker's CPU per no-op procedure goes: a burst worker run in this process under cProfile, with counts.

    python -m benchmarks.worker_profile [--n 20000] [--threads 1] [--top 25] [--save FILE.prof] [--no-profile]
                                        [--sleepers N]

Submits ``--n`` no-op procedures into a fresh database, then runs one burst
worker (``--threads`` executor threads) in this process until it has drained
them, with a ``cProfile`` profiler on every thread that measures each
thread's own CPU time (``time.thread_time``), so a thread waiting for the
database or the interpreter lock costs nothing (on Python 3.12 and later, whose
profiler is one per process, a single profiler measures the process's CPU time). It prints the worker's CPU
and Python calls per procedure, where the profiled time goes (by package and
by function), and the figures that do not depend on the machine's load:
statements and commits per procedure (counted in the worker,
:mod:`benchmarks.statements`; ``pg_stat_statements`` needs a server restart).
Profiling makes every Python call slower (about 2x here): compare profiles with profiles; ``--no-profile``
gives the worker's plain CPU per procedure (the statement counter still adds a few µs per statement, and a
small ``--n`` is mostly start-up). ``--sleepers N`` seeds N procedures asleep for days beside the no-ops (as
the ``sleepers`` benchmark does), to see which statements cost more beside them: the statements are listed with
the time each kind took per procedure (its round trips, the server's work included).
Nothing is appended to ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any

from benchmarks.harness import Databases, close_connection
from benchmarks.run import add_database_url, machine, standalone


def by_package(stats: pstats.Stats) -> Counter[str]:
    """Profiled seconds by where the code lives: psycopg, Django's database layer, our modules, the rest."""
    totals: Counter[str] = Counter()
    for (path, _, _name), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "psycopg" in path:
            key = "psycopg"
        elif "/django/db/" in path or "asgiref" in path:
            key = "Django's database layer (atomic, connections, asgiref)"
        elif "django_procedures/" in path:
            key = "django_procedures." + path.split("django_procedures/")[1].removesuffix(".py").replace("/", ".")
        elif path == "~":
            key = "built-ins"
        else:
            key = "other (Django, the standard library)"
        totals[key] += own
    return totals


def profiled_worker(threads: int, profile: bool) -> tuple[float, float, pstats.Stats | None]:
    """Run a burst worker on the current database; its wall and CPU seconds, and the merged profile."""
    from django.core.management import call_command

    profiles: list[cProfile.Profile] = []
    run = threading.Thread.run

    def profiled_run(self: threading.Thread) -> None:
        profiler = cProfile.Profile(time.thread_time)
        profiles.append(profiler)
        profiler.enable()
        try:
            run(self)
        finally:
            profiler.disable()

    # Python 3.12's cProfile sits on sys.monitoring: one profiler per process, and it sees every thread,
    # so a thread's own clock would mix threads; it measures the process's CPU instead.
    per_thread = sys.version_info < (3, 12)
    main = cProfile.Profile(time.thread_time if per_thread else time.process_time)
    if profile:
        if per_thread:
            threading.Thread.run = profiled_run  # type: ignore[method-assign]
        profiles.append(main)
        main.enable()
    started, cpu = time.monotonic(), time.process_time()
    try:
        call_command("procedures_worker", "--burst", "--concurrency", str(threads), "--worker-id", "profile")
    finally:
        main.disable()
        threading.Thread.run = run  # type: ignore[method-assign]
    wall, cpu = time.monotonic() - started, time.process_time() - cpu
    merged = None
    for profiler in profiles:
        profiler.create_stats()
        if profiler.stats:  # type: ignore[attr-defined]
            merged = pstats.Stats(profiler) if merged is None else merged.add(profiler)
    return wall, cpu, merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker_profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="no-op procedures to drain")
    parser.add_argument("--threads", type=int, default=1, help="executor threads of the worker")
    parser.add_argument("--top", type=int, default=25, help="functions to list, by their own profiled time")
    parser.add_argument("--save", default="", help="write the merged profile here (pstats format)")
    parser.add_argument("--no-profile", action="store_true", help="no profiler: the worker's plain CPU")
    parser.add_argument("--sleepers", type=int, default=0, help="procedures asleep for days beside the no-ops")
    add_database_url(parser)
    args = parser.parse_args(argv)
    os.environ["PROCEDURES_JSON"] = '{"BURST_WAIT_SECONDS": 0.3}'
    server, prefix = standalone(args.database_url)
    from benchmarks import statements
    from benchmarks.common import checkpoint, submit
    from benchmarks.procedures import Noop

    statements.install(tempfile.mkdtemp(prefix="procedures-statements-"))
    databases = Databases(server, prefix)
    print(f"worker profile: {args.n:,} no-ops, 1 worker x {args.threads} thread(s); {machine()}", flush=True)
    try:
        with databases.fresh("worker_profile") as db:
            if args.sleepers:
                from benchmarks.waits import seed_sleepers_and_analyze

                seed_sleepers_and_analyze(args.sleepers)
            submit(Noop, [{}] * args.n)
            checkpoint()
            close_connection()
            server.wait_disconnected(db)
            before = server.xact_commit(db)
            statements._counts.clear()
            statements._seconds.clear()
            wall, cpu, stats = profiled_worker(args.threads, profile=not args.no_profile)
            close_connection()
            server.wait_disconnected(db)
            commits = server.xact_commit(db) - before
        report(args, wall, cpu, stats, commits, Counter(statements._counts), Counter(statements._seconds))
    finally:
        databases.drop_all()
    return 0


def report(args: Any, wall: float, cpu: float, stats: pstats.Stats | None, commits: int,
           counts: Counter[str], seconds: Counter[str]) -> None:
    n = args.n
    print(f"{n / wall:,.0f} procedures/s; worker CPU {cpu / n * 1e6:,.0f} µs per procedure"
          f"{' (profiled)' if stats else ''}; {commits / n:.3f} commits per procedure")
    sent = sum(v for k, v in counts.items() if not k.startswith("("))
    print(f"statements per procedure {sent / n:.3f}; round trips with BEGIN and COMMIT {sum(counts.values()) / n:.3f}")
    print("per procedure: statements, and µs in them (round trips: the server's work and the wire)")
    for sql, count in counts.most_common(10):
        print(f"  {count / n:6.3f}  {seconds[sql] / n * 1e6:7.1f} µs  {sql[:100]}")
    if stats is None:
        return
    calls = sum(nc for _, nc, _, _, _ in stats.stats.values())  # type: ignore[attr-defined]
    profiled = sum(own for _, _, own, _, _ in stats.stats.values())  # type: ignore[attr-defined]
    print(f"Python calls per procedure {calls / n:,.1f}; profiled CPU {profiled / n * 1e6:,.0f} µs per procedure")
    print("profiled CPU by package (own time):")
    for key, seconds in by_package(stats).most_common(16):
        print(f"  {seconds / n * 1e6:7.1f} µs  {seconds / profiled:5.1%}  {key}")
    if args.save:
        stats.dump_stats(args.save)
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    raise SystemExit(main())
