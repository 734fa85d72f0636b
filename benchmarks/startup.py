"""What a burst worker's start-up costs, stage by stage, from its launch to its first claim.

    python -m benchmarks.startup [--runs 5] [--workers 2] [--n 100]

The peers comparison (``--peers``) times each drain from the workers' launch,
so start-up is part of its "wall" figure (the difference between its wall and
active rates). This tells what that start-up is made of: each run submits
``--n`` no-op procedures into a fresh database, launches ``--workers`` burst
workers at once as the comparison does (``manage.py procedures_worker`` in
the comparison's small project, ``benchmarks.settings_peers``), and each worker
stamps when it reaches each stage: interpreter up, ``django.setup()``, the
worker runtime imported, the system checks, the tables check (the first
connection), the start-up reports, the worker row, and the first claim that
returned procedures. The stamps come from wrappers this module puts around
those functions in the worker process (``--child``); the worker's code is not
changed. Prints the median of each stage over the workers of every run.
Nothing is appended to ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

#: The stages, in the order a worker reaches them (each stamp is taken when the stage ends).
STAGES = ("interpreter up", "django.setup()", "worker runtime imported", "system checks",
          "tables check (first connection)", "start-up reports", "worker row registered", "first claim")
MARK = "STARTUP-STAMPS "


def _child(argv: list[str]) -> None:
    """In the worker process: wrap the stages' functions to stamp their ends, run the worker, print the stamps."""
    import atexit

    stamps = {"launched": float(os.environ["STARTUP_LAUNCHED"]), "interpreter up": time.time()}

    def mark(name: str) -> None:
        stamps.setdefault(name, time.time())

    def after(owner: Any, name: str, stage: str) -> None:
        original = getattr(owner, name)

        def stamped(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            mark(stage)
            return result
        setattr(owner, name, stamped)

    atexit.register(lambda: print(MARK + json.dumps(stamps), flush=True))
    import django

    django.setup()
    mark("django.setup()")
    from django.core.management import execute_from_command_line
    from django.core.management.base import BaseCommand

    from django_procedures.runtime import observe, reporting, worker, worker_row  # noqa: F401 (the runtime's import)

    mark("worker runtime imported")
    after(BaseCommand, "check", "system checks")
    after(reporting, "tables_ready", "tables check (first connection)")
    after(reporting, "report_schedules", "start-up reports")
    after(worker_row.WorkerRow, "register", "worker row registered")
    claimed: Callable[[Any], None] = observe.claimed

    def first_claim(claims: Any) -> None:
        if claims:
            mark("first claim")
        claimed(claims)
    observe.claimed = first_claim  # the worker calls it through the module
    execute_from_command_line(["manage.py", "procedures_worker", *argv])


def stage_times(stamps: dict[str, float]) -> dict[str, float]:
    """Milliseconds each stage took (from the previous one; the first from the launch), and the total."""
    out, previous = {}, stamps["launched"]
    for stage in STAGES:
        if stage in stamps:
            out[stage] = (stamps[stage] - previous) * 1000
            previous = stamps[stage]
    if "first claim" in stamps:
        out["launch to first claim"] = (stamps["first claim"] - stamps["launched"]) * 1000
    return out


def parse_stamps(output: str) -> dict[str, float]:
    for line in output.splitlines():
        if line.startswith(MARK):
            return dict(json.loads(line[len(MARK):]))
    raise ValueError(f"the worker printed no stamps:\n{output[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(argv[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="repetitions, each on a fresh database")
    parser.add_argument("--workers", type=int, default=2, help="workers launched at once (the comparison's 2)")
    parser.add_argument("--n", type=int, default=100, help="no-op procedures waiting for the workers")
    from benchmarks.harness import Databases, close_connection, median
    from benchmarks.run import add_database_url, machine, standalone

    add_database_url(parser)
    args = parser.parse_args(argv)
    server, prefix = standalone(args.database_url)
    from benchmarks.common import checkpoint, submit
    from benchmarks.procedures import Noop

    databases = Databases(server, prefix)
    print(f"start-up: {args.runs} run(s) of {args.workers} burst worker(s) x 4 threads; {machine()}", flush=True)
    times: dict[str, list[float]] = {}
    try:
        for run in range(args.runs):
            with databases.fresh(f"startup_{run}") as db:
                submit(Noop, [{}] * args.n)
                checkpoint()
                close_connection()
                server.wait_disconnected(db)
                env = {**os.environ, "DATABASE_URL": server.url(db),
                       "DJANGO_SETTINGS_MODULE": "benchmarks.settings_peers",
                       "PROCEDURES_JSON": '{"BURST_WAIT_SECONDS": 0.3}', "PROCEDURES_LOG": "WARNING",
                       "PYTHONUNBUFFERED": "1", "STARTUP_LAUNCHED": repr(time.time())}
                command = [sys.executable, "-m", "benchmarks.startup", "--child", "--burst", "--concurrency", "4"]
                workers = [subprocess.Popen([*command, "--worker-id", f"s{run}-{i}"], env=env, text=True,
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                           for i in range(args.workers)]
                for worker in workers:
                    out, _ = worker.communicate(timeout=120)
                    if worker.returncode != 0:
                        raise SystemExit(f"a worker failed ({worker.returncode}):\n{out[-2000:]}")
                    for stage, ms in stage_times(parse_stamps(out)).items():
                        times.setdefault(stage, []).append(ms)
                server.wait_disconnected(db)
    finally:
        databases.drop_all()
    for stage, values in times.items():
        print(f"  {stage:32s} {median(values):7.1f} ms  ({min(values):.1f}-{max(values):.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
