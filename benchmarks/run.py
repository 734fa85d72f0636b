"""Run the benchmark suite against PostgreSQL, print the table, and append it to ``benchmarks/RESULTS.md``.

    python -m benchmarks.run [--quick] [--only NAME[,NAME]] [--runs N] [--threads N]
                             [--database-url postgres://user@host:port/any] [--results PATH]
                             [--profile DIR] [--update-docs] [--keep-logs] [--peers] [--throwaway-server]
    python -m benchmarks.run --peers [--peers-n N] [--runs N] [...]

``--peers`` alone runs the comparison with the peers (``benchmarks.compare``):
our workers and Procrastinate's, DBOS's and Celery's (on Redis), interleaved, on the same server,
through the peer harness in ``../shared/peers`` (``benchmarks/peers.py``,
which installs its own virtualenv the first time). With ``--only``, each
chosen benchmark that has a peer runs it beside ours (tasks: django-tasks-db).

Every run of every benchmark creates its own database on that server (named
``bench_<pid>_...``) and drops it afterwards; the database named in the URL is
never touched. ``--quick`` runs each benchmark once at a tiny size, to keep the
suite working (CI); its figures mean nothing. ``history`` (ten million seeded
procedures) runs only when named with ``--only history`` (or with ``--quick``). Results are noisy when the
machine or the server is doing anything else: the header of each entry
records the load average and the other sessions on the server.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.harness import DEFAULT_URL, ROOT, Databases, Server, median

#: Worker threads per process: the best of 1, 2, 4, 8 and 16 on the 2-core reference machine (docs/performance.md).
DEFAULT_THREADS = 4
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
DOCS = ROOT / "docs" / "performance.md"
RESULTS_MARKS = ("<!-- results:start -->", "<!-- results:end -->")
PEERS_MARKS = ("<!-- peers:start -->", "<!-- peers:end -->")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from benchmarks.suite import ALIASES, BENCHMARKS, ON_PURPOSE

    names = [*BENCHMARKS, *ALIASES]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="each benchmark once at a tiny size (CI)")
    parser.add_argument("--only", default="", help=f"comma-separated benchmarks to run: {', '.join(names)}")
    parser.add_argument("--runs", type=int, default=None, help="runs per benchmark (default 3; 1 with --quick)")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help=f"executor threads per worker process (default {DEFAULT_THREADS})")
    add_database_url(parser)
    parser.add_argument("--results", type=Path, default=RESULTS, help="file the dated table is appended to")
    parser.add_argument("--profile", type=Path, default=None,
                        help="attach py-spy to every worker and write raw (collapsed) stacks into this directory")
    parser.add_argument("--update-docs", action="store_true", help=f"put the table into {DOCS.relative_to(ROOT)}")
    parser.add_argument("--keep-logs", action="store_true", help="keep the workers' log files")
    parser.add_argument("--peers", action="store_true",
                        help="alone: compare with Procrastinate, DBOS and Celery (interleaved runs, paired ratios); "
                             "with --only: also run each chosen benchmark's peer in the same run, through the peer "
                             "harness (benchmarks/peers.py; installs its own virtualenv the first time): tasks -> "
                             "django-tasks-db's db_worker")
    parser.add_argument("--peers-n", type=int, default=None,
                        help="jobs per drain in the --peers comparison (default 5000; 200 with --quick)")
    parser.add_argument("--throwaway-server", action="store_true",
                        help="run on a PostgreSQL cluster of its own (initdb on a free port, max_connections 200, "
                             "removed at the end) instead of --database-url: the direct fleet needs ~90 connections")
    parser.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                        help="override one size of the chosen set, e.g. --size throughput=5000 (names: the "
                             "fields of benchmarks.common.Sizes); for profiling, not for the recorded figures")
    args = parser.parse_args(argv)
    # The fleet runs only when named (or at the quick size): it needs about 90 connections and PgBouncer.
    selected = [n.strip() for n in args.only.split(",") if n.strip()] or [
        n for n in BENCHMARKS if n not in ON_PURPOSE or args.quick]
    unknown = [n for n in selected if n not in names]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(names)}")
    args.selected = list(dict.fromkeys(ALIASES.get(n, n) for n in selected))
    if args.runs is None:
        args.runs = 1 if args.quick else 3
    if args.runs < 1 or args.threads < 1:
        parser.error("--runs and --threads must be at least 1")
    if args.peers_n is None:
        args.peers_n = 200 if args.quick else 5000
    if args.peers_n < 10:
        parser.error(f"--peers-n must be at least 10 (ten-step jobs take N/10); got {args.peers_n}")
    #: --peers without --only: the comparison with Procrastinate, DBOS and Celery, instead of the suite.
    args.compare = args.peers and not args.only
    if args.compare:
        args.selected = ["peers"]
    args.sizes = {}
    for item in args.size:
        name, _, value = item.partition("=")
        try:
            args.sizes[name.strip()] = float(value) if "." in value else int(value)
        except ValueError:
            parser.error(f"--size takes NAME=NUMBER, got {item!r}")
    return args


def _postgres_env() -> str | None:
    url = os.environ.get("DATABASE_URL", "")
    return url if url.startswith(("postgres://", "postgresql://")) else None


def add_database_url(parser: argparse.ArgumentParser) -> None:
    """The ``--database-url`` option of every benchmark command."""
    default = os.environ.get("BENCH_DATABASE_URL") or _postgres_env() or DEFAULT_URL
    parser.add_argument("--database-url", default=default,
                        help="the PostgreSQL server to create the benchmark databases on (default: "
                             "BENCH_DATABASE_URL, else a postgres:// DATABASE_URL, else " + DEFAULT_URL + ")")


def standalone(database_url: str) -> tuple[Server, str]:
    """For a benchmark run as a command of its own: its server, the prefix of its databases; Django set up."""
    server = Server.from_url(database_url)
    prefix = f"bench_{os.getpid()}"
    setup_django(server, prefix)
    return server, prefix


def setup_django(server: Server, prefix: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    os.environ["DATABASE_URL"] = server.url(f"{prefix}_unused")  # repointed per benchmark run
    os.environ.setdefault("PROCEDURES_LOG", "WARNING")
    import django

    django.setup()


def versions(server: Server) -> dict[str, str]:
    import django
    import psycopg

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "?"

    commit = git("rev-parse", "--short", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " (with uncommitted changes)"
    return {
        "Python": platform.python_version(),
        "Django": django.get_version(),
        "PostgreSQL": server.version(),
        "psycopg": f"{psycopg.__version__} (libpq {psycopg.pq.version()})",
        "git": f"{git('rev-parse', '--abbrev-ref', 'HEAD')} {commit}",
    }


def machine() -> str:
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPUs, load average {load}, {core_speed()}"


def core_speed() -> str:
    """How fast one core of this machine runs Python: the best of five ``sum(range(100_000))``.

    Machines of one kind are not all alike (one session's took 1.8 ms where others took about half);
    the figure tells a slow machine from a busy one when comparing runs.
    """
    import timeit

    best = min(timeit.repeat("sum(range(100_000))", number=20, repeat=5)) / 20
    return f"sum(range(100_000)) in {best * 1000:.2f} ms"


# --------------------------------------------------------------------------- the table


def fmt(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}"


def table(metrics: list) -> str:
    lines = ["| Benchmark | Measure | Median | Spread (min-max) | Runs | Target | Met |",
             "|---|---|---:|---:|---:|---:|:---:|"]
    for m in metrics:
        if m.values:
            mid = median(m.values)
            value = f"{fmt(mid, m.digits)} {m.unit}"
            spread = f"{fmt(min(m.values), m.digits)}-{fmt(max(m.values), m.digits)}"
            met = ("yes" if m.meets(mid) else "**no**") if m.meets else ""
        else:
            value, spread, met = m.note or "—", "", ""
        target = f"{m.target} {m.unit}" if m.target else ""
        lines.append(f"| {m.benchmark} | {m.metric} | {value} | {spread} | {len(m.values)} | {target} | {met} |")
    return "\n".join(lines)


def raw_values(metrics: list) -> str:
    return "\n".join(f"- {m.benchmark} / {m.metric}: " + ", ".join(fmt(v, max(m.digits, 1)) for v in m.values)
                     for m in metrics if m.values)


def entry(args: argparse.Namespace, info: dict[str, str], started: str, before: str, after: str,
          activity: str, body: str, raw: str, elapsed: float, progress: list[str]) -> str:
    command = "python -m benchmarks.run" + "".join(f" {shlex.quote(a)}" for a in sys.argv[1:])
    mode = "quick (tiny sizes: figures are meaningless)" if args.quick else "full sizes"
    if args.compare:
        mode = f"beside the peers, N = {args.peers_n:,}" + (" (quick: figures are meaningless)" if args.quick else "")
    if args.sizes:
        mode += " except " + ", ".join(f"{k}={v}" for k, v in args.sizes.items())
    return "\n".join([
        f"## {started}: {', '.join(args.selected)}, {mode}, {args.runs} run(s)",
        "",
        f"- Command: `{command}`",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in info.items()),
        f"- Machine: {before} at the start, {after} at the end; PostgreSQL on the same host "
        f"({activity} at the start). Other work on the machine and the server makes these figures noisy.",
        f"- Workers: real `procedures_worker` processes, {args.threads} threads each; took {elapsed / 60:.1f} min",
        "",
        body,
        "",
        "<details><summary>Per-run values and progress</summary>",
        "",
        raw,
        "",
        "```",
        *progress,
        "```",
        "",
        "</details>",
        "",
    ])


def append_results(path: Path, text: str) -> None:
    if not path.exists():
        path.write_text("# Benchmark results\n\nAppended by `python -m benchmarks.run`, newest last. "
                        "How to read and reproduce them: `docs/performance.md`.\n\n")
    with open(path, "a") as f:
        f.write(text + "\n")


def update_docs(text: str, marks: tuple[str, str] = RESULTS_MARKS) -> None:
    start, end = marks
    doc = DOCS.read_text()
    head, rest = doc.split(start, 1)
    _, tail = rest.split(end, 1)
    DOCS.write_text(f"{head}{start}\n{text}\n{end}{tail}")


def _peers(ctx: Any, args: argparse.Namespace, say: Any) -> tuple[str, str, bool]:
    """The peer comparison: (table, per-run lines, failed)."""
    from benchmarks import compare

    say(f"peers: ours, {', '.join(sorted({c.peer for c in compare.COMPARISONS}))}; N = {args.peers_n:,}")
    try:
        pairs = compare.compare(ctx, args.peers_n)
    except Exception as error:
        say(f"  peers FAILED: {error}")
        traceback.print_exc()
        return f"peers comparison failed: {str(error).splitlines()[0][:200]}", "", True
    return compare.table(pairs, args.peers_n, args.threads), compare.raw(pairs), False


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.throwaway_server:
        return run(args)
    from benchmarks.pgbouncer import free_port
    from benchmarks.soak_cluster import throwaway_cluster

    with throwaway_cluster(free_port(), keep=False) as cluster:
        args.database_url = cluster.url
        print(f"throwaway PostgreSQL cluster on port {cluster.port}", flush=True)
        return run(args)


def run(args: argparse.Namespace) -> int:
    server, prefix = standalone(args.database_url)
    from benchmarks.common import Context, Metric
    from benchmarks.suite import BENCHMARKS, FULL, QUICK

    log_dir = Path(tempfile.mkdtemp(prefix="procedures-bench-"))
    databases = Databases(server, prefix)
    progress: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        progress.append(line)

    try:
        sizes = dataclasses.replace(QUICK if args.quick else FULL, **args.sizes)
    except TypeError as error:
        raise SystemExit(f"--size: {error}") from None
    ctx = Context(server=server, databases=databases, sizes=sizes, runs=args.runs,
                  threads=args.threads, log_dir=log_dir, profile=args.profile, progress=say, peers=args.peers)
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    info = versions(server)
    before, activity = machine(), server.other_activity(prefix)
    say(f"benchmarks: {', '.join(args.selected)}; {args.runs} run(s); {args.threads} threads per worker; "
        f"{before}; {activity}")
    t0 = time.monotonic()
    metrics: list[Metric] = []
    failed = False
    body = raw = ""
    try:
        if args.compare:
            body, raw, failed = _peers(ctx, args, say)
        for name in [] if args.compare else args.selected:
            say(f"{name}:")
            try:
                metrics += BENCHMARKS[name](ctx)
            except Exception as error:  # report it, keep the other benchmarks' figures
                failed = True
                say(f"  {name} FAILED: {error}")
                traceback.print_exc()
                metrics.append(Metric(name, "failed: " + str(error).splitlines()[0][:100], "", note="error"))
    finally:
        databases.drop_all()
    elapsed = time.monotonic() - t0
    if not args.compare:
        body, raw = table(metrics), raw_values(metrics)
    print()
    print(body)
    text = entry(args, info, started, before, machine(), activity, body, raw, elapsed, progress)
    append_results(args.results, text)
    print(f"\nappended to {args.results}")
    if args.update_docs:
        update_docs(text, PEERS_MARKS if args.compare else RESULTS_MARKS)
        print(f"updated {DOCS}")
    if failed or args.keep_logs:
        print(f"worker logs: {log_dir}")
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
