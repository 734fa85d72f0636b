"""Fault-injection soak: kills, freezes and database restarts; nothing lost, nothing doubled.

Run from the repository root::

    python -m benchmarks.soak                 # full: 10,000 procedures, 480 s of chaos
    python -m benchmarks.soak --quick         # CI: 1,000 procedures, about a minute in all
    python -m benchmarks.soak --procedures 5000 --seconds 120 --workers 3 --port 55432 --keep
    python -m benchmarks.soak --quick --pgbouncer   # the workers behind PgBouncer in transaction mode

What it does:

1. Creates a throwaway PostgreSQL cluster of its own (``initdb`` into a temporary folder, trust
   auth, started with ``pg_ctl`` on ``--port``, socket in that folder; run as the ``postgres`` OS
   user when started as root), creates a database there and migrates it. Nothing else is touched:
   ``DATABASE_URL`` is pointed at that cluster for this process and its workers.
2. Submits a mixed workload of ``--procedures`` top-level procedures (the ``soak.*`` classes of
   ``testproject/testapp/procedures.py``): multi-step with atomic and non-atomic steps, trees of
   children (some two levels deep, some taking lock keys lent by their parent), lock keys under
   contention, steps that fail and retry, procedures that fail for good and roll back, and a
   non-idempotent step. Their ``run_at`` is spread over the first 70% of the chaos window, so
   faults hit work in flight from start to end.
3. Runs ``--workers`` ``procedures_worker`` processes while a chaos loop, every few seconds, picks
   a worker at random and sends SIGKILL (then starts a new one), SIGSTOP for longer than the lease
   (then SIGCONT), or SIGTERM (then starts a new one). Once during the run it restarts PostgreSQL
   itself (``pg_ctl restart -m fast``), and once it terminates every worker connection
   (``pg_terminate_backend``). A worker that exits on its own is a finding, and is restarted.
   With ``--pgbouncer`` the workers reach the cluster through a PgBouncer of the soak's own, in
   transaction mode (``benchmarks/pgbouncer.py``; LISTEN on a direct connection), and once during the
   run that PgBouncer is killed and started again: every worker connection through it is cut.
4. Waits (bounded) until every procedure is final, stops the workers with SIGTERM, checks the
   invariants (see docs/guarantees.md) from the database, prints them as a table, and exits 1 on
   any breach.

The lost-attempt budget: every fault loses at most the attempts in flight on one worker, and a
procedure's steps are short, so one step is almost never in flight at two faults; the default
``RetryPolicy.max_lost`` (10) is kept, and the table shows the largest number of lost attempts of
one step. The workers run with a short lease (``--lease``, default 5 s) and sweep every second, so
a lost attempt is recovered within seconds.

The cluster and the temporary folder are removed at the end unless ``--keep`` is given (then the
cluster keeps running and the command to stop it is printed). Worker logs are copied to
``var/soak-<time>/`` when an invariant is breached or ``--keep`` is given.

This module is the driver (the workload, the command line, the run); ``benchmarks/soak_cluster.py`` holds
the cluster, the workers and the faults, ``benchmarks/soak_checks.py`` the invariants.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import timedelta
from typing import Any

from benchmarks.soak_checks import (
    check_invariants,
    diagnose,
    print_table,
    wait_quiescent,
    with_reconnect,
    worker_log_facts,
)
from benchmarks.soak_cluster import (
    DATABASE,
    PGBOUNCER_LOGIN_RETRY,
    ROOT,
    ChaosReport,
    Cluster,
    Profile,
    SoakWorker,
    chaos,
    find_bindir,
    log,
    supervise,
    throwaway_cluster,
)

#: Imported from here by the tests.
__all__ = ["Cluster", "find_bindir", "main", "throwaway_cluster"]


# --------------------------------------------------------------------------- the workload


def build_workload(n: int, rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    """``n`` top-level (type name, state) pairs in a fixed mix."""
    key_pool = max(4, n // 60)  # contended keys: several procedures queue for each
    # A tree holds its key from its first claim until its last child and its collect step are done, and a
    # resumed parent queues behind everything due before it: few trees per key, or they form a convoy.
    tree_key_pool = max(2, n // 40)
    mix = [("steps", 32), ("flaky", 14), ("tree", 16), ("failing_tree", 6), ("keyed", 12), ("compensated", 8),
           ("charge", 10), ("flaky_fails", 2)]
    kinds = rng.choices([k for k, _ in mix], weights=[w for _, w in mix], k=n)
    work = []
    for kind in kinds:
        ms = rng.choice([0, 0, 5, 10, 30])
        if kind == "steps":
            work.append(("soak.Steps", {"n": rng.randrange(1000), "chain": rng.random() < 0.3, "ms": ms}))
        elif kind == "flaky":
            work.append(("soak.Flaky", {"fail_times": rng.choice([1, 1, 2, 3]), "ms": ms}))
        elif kind == "flaky_fails":
            work.append(("soak.Flaky", {"fail_times": 1000, "ms": ms}))
        elif kind == "tree":
            state: dict[str, Any] = {"depth": 2 if rng.random() < 0.2 else 1, "fanout": rng.choice([2, 3]), "ms": ms}
            if state["depth"] == 1 and rng.random() < 0.4:
                key = f"soak:tree:{rng.randrange(tree_key_pool)}"
                state["keys"] = [[key, "exclusive"]]
                state["child_keys"] = [[key, "exclusive"]]  # lent by the parent; the leaves take turns
            work.append(("soak.Tree", state))
        elif kind == "failing_tree":
            fanout = rng.choice([2, 3])
            work.append(("soak.Tree", {"depth": 1, "fanout": fanout, "failing": [rng.randrange(fanout)], "ms": ms}))
        elif kind == "keyed":
            mode = "shared" if rng.random() < 0.25 else "exclusive"
            keys = sorted({f"soak:key:{rng.randrange(key_pool)}" for _ in range(rng.choice([1, 1, 2]))})
            work.append(("soak.Keyed", {"keys": [[k, mode] for k in keys], "ms": ms}))
        elif kind == "compensated":
            work.append(("soak.Compensated", {"ms": ms}))
        else:
            work.append(("soak.Charge", {"ms": ms}))
    return work


def submit_workload(work: list[tuple[str, dict[str, Any]]], spread: float, rng: random.Random) -> None:
    """Submit in one-second buckets of ``run_at`` over ``[0, spread]`` seconds from now."""
    from django.db import transaction

    from django_procedures import registry

    buckets: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for type_name, state in work:
        buckets[(type_name, int(rng.random() * spread))].append(state)
    with transaction.atomic():
        for (type_name, second), states in sorted(buckets.items()):
            registry.get(type_name).submit_many(states, run_after=timedelta(seconds=second))


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Profile]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI size: 1,000 procedures, 30 s of chaos")
    parser.add_argument("--procedures", type=int, help="top-level procedures to submit (full 10000, quick 1000)")
    parser.add_argument("--seconds", type=float, help="length of the chaos phase (full 480, quick 30)")
    parser.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    parser.add_argument("--concurrency", type=int, default=4, help="executor threads per worker (default 4)")
    parser.add_argument("--lease", type=float, default=5.0, help="lease seconds of the workers (default 5)")
    parser.add_argument("--port", type=int, default=55432, help="port of the throwaway cluster (default 55432)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock, printed)")
    parser.add_argument("--keep", action="store_true", help="keep the cluster running and the logs afterwards")
    parser.add_argument("--pgbouncer", action="store_true",
                        help="workers through a PgBouncer of its own in transaction mode, killed and restarted once")
    args = parser.parse_args(argv)
    quick = args.quick
    profile = Profile(
        procedures=args.procedures or (1000 if quick else 10000),
        seconds=args.seconds if args.seconds is not None else (30.0 if quick else 480.0),
        workers=args.workers, concurrency=args.concurrency, lease=args.lease,
        chaos_every=(1.5, 3.0) if quick else (2.0, 5.0),
        settle_seconds=450.0 if quick else 900.0,  # a bound against a hang: CI machines may be busy
    )
    if profile.workers < 1 or profile.procedures < 1 or profile.seconds <= 0:
        parser.error("--workers, --procedures and --seconds must be positive")
    return args, profile


def main(argv: list[str] | None = None) -> int:
    args, profile = parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    began = time.monotonic()
    log(f"seed {seed}; {profile.procedures} procedures, {profile.seconds:g}s of chaos, {profile.workers} workers x "
        f"{profile.concurrency} threads, lease {profile.lease:g}s")
    with throwaway_cluster(args.port, args.keep) as cluster:
        os.environ["DATABASE_URL"] = cluster.url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
        os.environ.pop("PROCEDURES_JSON", None)
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        log(f"cluster up on port {cluster.port} ({cluster.bindir.parent.name}); migrated {DATABASE}")

        work = build_workload(profile.procedures, rng)
        submit_workload(work, spread=profile.seconds * 0.7, rng=rng)
        log(f"submitted {len(work)} procedures: {dict(Counter(t for t, _ in work))}")

        logdir = cluster.base / "logs"
        logdir.mkdir()
        env = dict(os.environ, PYTHONUNBUFFERED="1", PROCEDURES_LOG="INFO", PROCEDURES_JSON=json.dumps(
            {"SWEEP_SECONDS": 1.0, "STATS_SECONDS": 30.0}))
        env.pop("TESTAPP_EXTRA_TYPES", None)
        bouncer = None
        if args.pgbouncer:
            from benchmarks.pgbouncer import WORKER_SETTINGS, PgBouncer

            bouncer = PgBouncer(cluster.base / "pgbouncer", server_port=cluster.port)
            bouncer.start()
            env.update(DATABASE_URL=bouncer.url(DATABASE), LISTEN_DATABASE_URL=cluster.url,
                       PROCEDURES_JSON=json.dumps({**json.loads(env["PROCEDURES_JSON"]), **WORKER_SETTINGS}))
            log(f"workers go through PgBouncer on port {bouncer.port} (transaction mode), LISTEN directly")
        pool = [SoakWorker(slot, logdir, profile, env) for slot in range(1, profile.workers + 1)]
        report = ChaosReport(fault_aftermath=PGBOUNCER_LOGIN_RETRY if bouncer is not None else 0.0)
        try:
            for w in pool:
                w.start()
            chaos_started = time.monotonic()
            chaos(pool, cluster, profile, rng, report, bouncer)
            log(f"chaos over after {time.monotonic() - chaos_started:.0f}s: {report.events()}")
            quiescent, settled = wait_quiescent(profile.settle_seconds, pool, report)
            log(f"{'quiescent' if quiescent else 'NOT quiescent'} {settled:.0f}s after the chaos")
            if not quiescent:  # while the workers still run: their sessions and locks tell why
                try:
                    diagnose(logdir / "unfinished.txt")
                except Exception as error:
                    log(f"could not write the diagnosis: {error}")
            # A worker restarted in the last seconds of the chaos may still be starting: a SIGTERM before
            # it installs its handlers ends it by the signal, which would test nothing about shutdown.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not all(w.healthy() for w in pool if w.alive()):
                supervise(pool, report, time.monotonic())
                time.sleep(0.2)
            for w in pool:
                w.expected_exit = True
                w.send(signal.SIGTERM)
            for w in pool:
                try:
                    report.final_exit_codes[w.name] = w.popen.wait(30) if w.popen else None
                except subprocess.TimeoutExpired:
                    report.final_exit_codes[w.name] = None
        finally:
            for w in pool:
                w.send(signal.SIGCONT)
                w.kill()
            if bouncer is not None:
                bouncer.stop()

        from django.db import connection

        connection.close()
        checks, facts = with_reconnect(lambda: check_invariants(pool, report, quiescent))
        logs = worker_log_facts(pool)
        elapsed = time.monotonic() - began
        print()
        print(f"soak: {facts['roots']} top-level procedures ({facts['total']} with children), seed {seed}, "
              f"{profile.workers} workers x {profile.concurrency} threads, lease {profile.lease:g}s, "
              f"{profile.seconds:g}s of chaos, {elapsed:.0f}s in all")
        print(f"faults: {report.events()}")
        print(f"final statuses: {facts['statuses']}")
        print(f"attempts: {facts['failed_attempts']} failed (by design), {facts['lost_attempts']} lost with their "
              f"worker, {facts['non_atomic_reruns']} non-atomic re-runs; leases: {facts['lease_outcomes']}")
        print(f"worker logs: {logs}")
        print_table(checks)
        ok = all(c.ok for c in checks)
        if not ok or args.keep:
            saved = ROOT / "var" / f"soak-{time.strftime('%Y%m%d-%H%M%S')}"
            shutil.copytree(logdir, saved)
            shutil.copy(cluster.logfile, saved / "postgresql.log")
            cluster.dump(saved / f"{DATABASE}.dump")
            log(f"worker logs saved in {saved}")
        print(f"soak {'passed' if ok else 'FAILED'}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
