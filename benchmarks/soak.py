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
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATABASE = "procedures_soak"
#: application_name prefix of worker connections (set by the worker; see runtime/worker.py).
WORKER_APP_PREFIX = "procedures-worker"


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------- the throwaway cluster


def find_bindir() -> Path:
    """The newest PostgreSQL server binaries: ``$PG_BINDIR``, ``pg_config --bindir``, /usr/lib/postgresql."""
    candidates = []
    if os.environ.get("PG_BINDIR"):
        candidates.append(Path(os.environ["PG_BINDIR"]))
    if shutil.which("pg_config"):
        with contextlib.suppress(subprocess.CalledProcessError, OSError):
            candidates.append(Path(subprocess.check_output(["pg_config", "--bindir"], text=True).strip()))
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                         key=lambda p: [int(x) for x in p.parent.name.split(".") if x.isdigit()], reverse=True)
    for path in candidates:
        if (path / "initdb").exists() and (path / "pg_ctl").exists():
            return path
    raise SystemExit("the soak needs PostgreSQL's initdb and pg_ctl: install the server package, or set "
                     "PG_BINDIR to the folder that holds them")


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Cluster:
    """A PostgreSQL cluster in a temporary folder, on its own port, trust auth."""

    def __init__(self, base: Path, port: int) -> None:
        self.bindir = find_bindir()
        self.base = base
        self.data = base / "data"
        self.logfile = base / "postgresql.log"
        self.port = port
        self.running = False
        self._as_postgres = os.geteuid() == 0

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self._as_postgres:  # initdb and postgres refuse to run as root
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, cwd=self.base)
        if check and result.returncode:
            raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}"
                               f"\n{self._log_tail()}")
        return result

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return ""

    def _options(self) -> str:
        # fsync=off only matters if the machine itself crashes; restarts here are clean (fast mode).
        return (f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c max_connections=200 -c shared_buffers=128MB")

    def create(self) -> None:
        if port_in_use(self.port):
            raise SystemExit(f"port {self.port} is already in use: pass --port with a free one")
        if self._as_postgres:
            entry = pwd.getpwnam("postgres")
            os.chown(self.base, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        self.start()
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-o", self._options(), "-w", "start")
        self.running = True

    def restart(self) -> float:
        started = time.monotonic()
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-o", self._options(), "-m", "fast",
                  "-w", "restart")
        return time.monotonic() - started

    def stop(self) -> None:
        if self.running:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)
            self.running = False

    def dump(self, path: Path) -> None:
        """pg_dump the soak database (custom format) to ``path``, for a post-mortem."""
        result = subprocess.run([str(self.bindir / "pg_dump"), "-h", "127.0.0.1", "-p", str(self.port), "-U",
                                 "postgres", "-Fc", "-f", str(path), DATABASE], capture_output=True, text=True)
        if result.returncode:
            log(f"pg_dump failed: {result.stderr.strip()}")

    def stop_command(self) -> str:
        prefix = "runuser -u postgres -- " if self._as_postgres else ""
        return f"{prefix}{self.bindir / 'pg_ctl'} -D {self.data} -m fast stop"

    def terminate_workers(self) -> int:
        """pg_terminate_backend every worker connection (by application_name; else every other backend)."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=DATABASE,
                             autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                "AND application_name LIKE %s", [DATABASE, f"{WORKER_APP_PREFIX}%"]).fetchall()
            if not rows:  # workers that do not name their connections
                rows = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                    "AND pid <> pg_backend_pid() AND backend_type = 'client backend'", [DATABASE]).fetchall()
        return sum(1 for (ok,) in rows if ok)


# --------------------------------------------------------------------------- the workload


@dataclass(frozen=True)
class Profile:
    procedures: int
    seconds: float
    workers: int
    concurrency: int
    lease: float
    chaos_every: tuple[float, float]
    settle_seconds: float


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


# --------------------------------------------------------------------------- worker processes


class SoakWorker:
    """One slot of the pool: the current ``procedures_worker`` process in it, and its generations."""

    def __init__(self, slot: int, logdir: Path, profile: Profile, env: dict[str, str]) -> None:
        self.slot = slot
        self.logdir = logdir
        self.profile = profile
        self.env = env
        self.generation = 0
        self.popen: subprocess.Popen[bytes] | None = None
        self.frozen_until: float | None = None
        self.terminating_since: float | None = None
        self.expected_exit = False
        self.logs: list[Path] = []
        #: per process (generation): [started, ended or None, times frozen]
        self.lives: list[list[Any]] = []

    @property
    def name(self) -> str:
        return f"soak-w{self.slot}-g{self.generation}"

    def start(self) -> None:
        self.generation += 1
        path = self.logdir / f"{self.name}.log"
        self.logs.append(path)
        command = [sys.executable, str(ROOT / "manage.py"), "procedures_worker", "--worker-id", self.name,
                   "--concurrency", str(self.profile.concurrency), "--lease-seconds", str(self.profile.lease),
                   "--shutdown-timeout", "5"]
        with open(path, "wb") as out:
            self.popen = subprocess.Popen(command, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT)
        self.frozen_until = self.terminating_since = None
        self.expected_exit = False
        self.lives.append([time.monotonic(), None, 0])

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def healthy(self) -> bool:
        """Running, not frozen or stopping, and past start-up (a fault before it would test nothing)."""
        if not (self.alive() and self.frozen_until is None and self.terminating_since is None):
            return False
        if time.monotonic() - self.lives[-1][0] < 2.0:
            return False
        with contextlib.suppress(OSError):
            return " started: " in self.logs[-1].read_text(errors="replace")
        return False

    def send(self, sig: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, sig)

    def kill(self) -> None:
        """SIGKILL (works on a stopped process too) and reap."""
        if self.popen is None:
            return
        self.expected_exit = True
        self.send(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)


# --------------------------------------------------------------------------- chaos


#: PgBouncer's default ``server_login_retry``: seconds it refuses logins after a server login failed.
PGBOUNCER_LOGIN_RETRY = 15.0


@dataclass
class ChaosReport:
    kills: int = 0
    stops: int = 0
    terms: int = 0
    pg_restarts: int = 0
    pgbouncer_restarts: int = 0
    pg_restart_seconds: float = 0.0
    #: time.monotonic() of the PostgreSQL restart and of the terminated connections
    database_faults: list[float] = field(default_factory=list)
    #: How long after a fault a worker starting up may still meet it: behind PgBouncer, a failed server login
    #: makes it refuse new ones for ``server_login_retry`` (15 s by default, as .ci/pgbouncer.ini leaves it).
    fault_aftermath: float = 0.0
    terminated_connections: int = 0
    unexpected_exits: list[str] = field(default_factory=list)
    slow_shutdowns: list[str] = field(default_factory=list)
    final_exit_codes: dict[str, int | None] = field(default_factory=dict)

    def events(self) -> str:
        return (f"SIGKILL {self.kills}, SIGSTOP {self.stops}, SIGTERM {self.terms}, PostgreSQL restarts "
                f"{self.pg_restarts} ({self.pg_restart_seconds:.1f}s), connections terminated "
                f"{self.terminated_connections}"
                + (f", PgBouncer restarts {self.pgbouncer_restarts}" if self.pgbouncer_restarts else ""))


def supervise(pool: list[SoakWorker], report: ChaosReport, now: float) -> None:
    """Resume frozen workers whose time is up; restart workers that exited (expected or not)."""
    for w in pool:
        if w.frozen_until is not None and now >= w.frozen_until:
            w.send(signal.SIGCONT)
            w.frozen_until = None
        if w.terminating_since is not None and w.alive() and now - w.terminating_since > 20:
            report.slow_shutdowns.append(f"{w.name} still running 20s after SIGTERM")
            w.kill()
        if not w.alive():
            rc = w.popen.returncode if w.popen else None
            # A SIGTERM that lands before the worker has installed its handlers ends it by the signal:
            # it held nothing yet. Any other exit after SIGTERM than 0 is a finding.
            stopped = w.terminating_since is not None and rc in (0, -signal.SIGTERM)
            if not w.expected_exit and not stopped:
                report.unexpected_exits.append(f"{w.name} exited with {rc}"
                                               + (" after SIGTERM" if w.terminating_since is not None else ""))
                log(f"worker {w.name} exited with {rc}")
            w.lives[-1][1] = now
            w.start()


def chaos(pool: list[SoakWorker], cluster: Cluster, profile: Profile, rng: random.Random,
          report: ChaosReport, bouncer: Any = None) -> None:
    started = time.monotonic()
    end = started + profile.seconds
    restart_at = started + profile.seconds * 0.35
    bouncer_restart_at = started + profile.seconds * 0.5
    terminate_at = started + profile.seconds * 0.65
    next_fault = started + rng.uniform(*profile.chaos_every)
    unused = rng.sample(["kill", "stop", "term"], 3)  # every kind of fault at least once, then at random
    while (now := time.monotonic()) < end:
        supervise(pool, report, now)
        if report.pg_restarts == 0 and now >= restart_at:
            report.database_faults.append(now)
            report.pg_restart_seconds = cluster.restart()
            report.pg_restarts += 1
            log(f"restarted PostgreSQL ({report.pg_restart_seconds:.1f}s)")
        elif bouncer is not None and report.pgbouncer_restarts == 0 and now >= bouncer_restart_at:
            report.database_faults.append(now)
            log(f"killed and restarted PgBouncer ({bouncer.restart():.1f}s)")
            report.pgbouncer_restarts += 1
        elif not report.terminated_connections and now >= terminate_at:
            report.database_faults.append(now)
            report.terminated_connections = cluster.terminate_workers() or -1
            log(f"terminated {report.terminated_connections} worker connections")
        elif now >= next_fault:
            next_fault = now + rng.uniform(*profile.chaos_every)
            candidates = [w for w in pool if w.healthy()]
            if len(candidates) > 1 or (candidates and len(pool) == 1):
                w = rng.choice(candidates)
                action = unused.pop() if unused else rng.choices(["kill", "stop", "term"], weights=[4, 3, 3])[0]
                if action == "kill":
                    log(f"SIGKILL {w.name}")
                    w.kill()
                    report.kills += 1
                elif action == "stop":
                    frozen = rng.uniform(profile.lease * 1.3, profile.lease * 2.6)
                    log(f"SIGSTOP {w.name} for {frozen:.1f}s")
                    w.send(signal.SIGSTOP)
                    w.frozen_until = now + frozen
                    w.lives[-1][2] += 1
                    report.stops += 1
                else:
                    log(f"SIGTERM {w.name}")
                    w.send(signal.SIGTERM)
                    w.terminating_since = now
                    report.terms += 1
        time.sleep(0.1)
    # Chaos is over: thaw the frozen, let the stopping finish, and keep the pool full.
    deadline = time.monotonic() + 30
    while any(w.frozen_until is not None or w.terminating_since is not None or not w.alive() for w in pool):
        for w in pool:
            if w.frozen_until is not None:
                w.frozen_until = 0.0
        supervise(pool, report, time.monotonic())
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)


# --------------------------------------------------------------------------- waiting and invariants


def with_reconnect(fn: Callable[[], Any], attempts: int = 30) -> Any:
    """Run a read on this process's own connection, reconnecting while the database restarts."""
    from django.db import DatabaseError, connection

    for attempt in range(attempts):
        try:
            return fn()
        except DatabaseError:
            connection.close()
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
    return None


def unfinished() -> int:
    from django_procedures.models import ProcedureRun

    return with_reconnect(lambda: ProcedureRun.objects.unfinished().count())


def wait_quiescent(timeout: float, pool: list[SoakWorker], report: ChaosReport) -> tuple[bool, float]:
    started = time.monotonic()
    last = None
    while True:
        supervise(pool, report, time.monotonic())
        left = unfinished()
        if left == 0:
            return True, time.monotonic() - started
        if left != last:
            log(f"{left} procedures not final yet")
            last = left
        if time.monotonic() - started > timeout:
            return False, time.monotonic() - started
        time.sleep(1.0)


@dataclass
class Check:
    name: str
    value: str
    ok: bool
    detail: str = ""


#: Expected final status of a top-level procedure, from its type and state.
def expected_statuses(type_name: str, state: dict[str, Any]) -> set[str]:
    if type_name == "soak.Flaky":
        return {"failed"} if state.get("fail_times", 0) >= 4 else {"done"}
    if type_name == "soak.Tree":
        return {"rolled_back"} if state.get("failing") else {"done"}
    if type_name == "soak.Compensated":
        return {"rolled_back"}
    if type_name == "soak.Charge":
        return {"done", "failed"}  # failed only when parked: lost inside the non-idempotent step
    return {"done"}


ATOMIC_STEPS = {
    "soak.Steps": {"a", "b", "c"}, "soak.Flaky": {"prepare", "work"}, "soak.Leaf": {"work"},
    "soak.Tree": {"spawn", "collect", "rollback"}, "soak.Keyed": {"take", "put"},
    "soak.Compensated": {"book", "rollback"}, "soak.Charge": {"receipt"},
}
NON_ATOMIC_STEPS = {"soak.Steps": {"d"}}
NON_IDEMPOTENT_STEPS = {"soak.Charge": {"charge"}}


#: WARNING lines a worker writes when it loses its database connection (one per outage is the promise).
LOSS_MESSAGES = ("database connection lost", "database error", "lease renewal failed", "could not record")


def check_invariants(pool: list[SoakWorker], report: ChaosReport,
                     quiescent: bool) -> tuple[list[Check], dict[str, Any]]:
    from django.db.models import Count

    from django_procedures import registry
    from django_procedures.models import KeyRequest, Lease, ProcedureRun, Step
    from django_procedures.policy.status import FINAL, LEASED
    from testproject.testapp.models import Effect

    runs = {r["id"]: r for r in ProcedureRun.objects.values(
        "id", "type_name", "status", "state", "parent_id", "root_id", "lock_keys", "keys_held", "waiting_for_keys",
        "lease_owner", "lease_expires_at", "error", "pending_children")}
    steps = list(Step.objects.values_list("procedure_id", "index", "name", "status", "started_at", "finished_at"))
    effects = Counter({(p, s): n for p, s, n in Effect.objects.values_list("procedure_id", "step")
                       .annotate(n=Count("id")).values_list("procedure_id", "step", "n")})
    checks: list[Check] = []
    facts: dict[str, Any] = {}

    def add(name: str, bad: list[Any], value: str | None = None) -> None:
        detail = "; ".join(str(b) for b in bad[:3])
        checks.append(Check(name, value if value is not None else str(len(bad)), not bad, detail))

    roots = [r for r in runs.values() if r["parent_id"] is None]
    facts["roots"], facts["total"] = len(roots), len(runs)
    facts["statuses"] = dict(Counter(r["status"] for r in runs.values()))

    # 1. every procedure reached a final status (and the one its design expects)
    add("every procedure reached a final status", [f"{r['id']} {r['status']}" for r in runs.values()
                                                    if r["status"] not in FINAL])
    add("each top-level procedure ended as designed",
        [f"{r['type_name']} {r['id']} {r['status']}: {r['error'][:120]}" for r in roots
         if r["status"] not in expected_statuses(r["type_name"], r["state"])
         or (r["type_name"] == "soak.Charge" and r["status"] == "failed"
             and r["error"] != "interrupted during non-idempotent step charge")])

    # 2. no step has two committed checkpoints
    committed = Counter((p, i) for p, i, _, status, _, _ in steps if status == "done")
    add("no step has two committed checkpoints", [k for k, n in committed.items() if n > 1])

    # 3. database effects: exactly once per committed atomic step, >= 1 non-atomic, <= 1 non-idempotent
    done_by_name = Counter((p, name) for p, _, name, status, _, _ in steps if status == "done")
    wrong, duplicates, doubled = [], 0, []
    for pid, r in runs.items():
        t = r["type_name"]
        for name in ATOMIC_STEPS.get(t, ()):
            if effects[(pid, name)] != done_by_name[(pid, name)]:
                wrong.append(f"{t} {pid} step {name}: {effects[(pid, name)]} rows, "
                             f"{done_by_name[(pid, name)]} commits")
        for name in NON_ATOMIC_STEPS.get(t, ()):
            if done_by_name[(pid, name)] and effects[(pid, name)] < 1:
                wrong.append(f"{t} {pid} non-atomic step {name} committed without its effect")
            duplicates += max(0, effects[(pid, name)] - 1)
        for name in NON_IDEMPOTENT_STEPS.get(t, ()):
            if effects[(pid, name)] > 1 or (done_by_name[(pid, name)] and effects[(pid, name)] != 1):
                doubled.append(f"{t} {pid} non-idempotent step {name}: {effects[(pid, name)]} effects")
    add("atomic steps' rows exist exactly once per committed step", wrong,
        f"{len(wrong)} (of {sum(effects.values())} rows)")
    add("non-idempotent steps took effect at most once", doubled)
    facts["non_atomic_reruns"] = duplicates

    # 4. no lease is left open
    open_leases = list(Lease.objects.filter(released_at__isnull=True).values_list("procedure_id", "token")[:10])
    held = [f"{r['id']} {r['status']} {r['lease_owner']}" for r in runs.values()
            if r["status"] in LEASED or r["lease_owner"] or r["lease_expires_at"] is not None]
    add("no lease is left open", open_leases + held, str(len(open_leases) + len(held)))

    # 5. no lock key is held by a finished procedure; exclusive keys never overlapped
    stale_keys = list(KeyRequest.objects.filter(procedure__status__in=FINAL).values_list("name", "procedure_id")[:10])
    stale_keys += [f"{r['id']} keys_held/waiting flag" for r in runs.values()
                   if r["status"] in FINAL and (r["keys_held"] or r["waiting_for_keys"])]
    add("no lock key is held by a finished procedure", stale_keys)
    add("exclusive keys never held by two procedures at once", _key_overlaps(runs, steps))

    # 6. every parent's children are final (and a done parent's children are all done)
    children: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in runs.values():
        if r["parent_id"] is not None:
            children[r["parent_id"]].append(r)
    orphans = []
    for pid, kids in children.items():
        parent = runs[pid]
        for kid in kids:
            if kid["status"] not in FINAL or (parent["status"] == "done" and kid["status"] != "done"):
                orphans.append(f"parent {pid} {parent['status']}: child {kid['id']} {kid['status']}")
        if parent["status"] in FINAL and parent["pending_children"]:
            orphans.append(f"parent {pid} final with pending_children={parent['pending_children']}")
    add("every parent's children are final", orphans, f"{len(orphans)} (of {len(children)} parents)")

    # 7. retry counts within budget
    failed_per_step = Counter((p, i) for p, i, name, status, _, _ in steps if status == "failed" and name != "rollback")
    lost_per_step = Counter((p, i) for p, i, _, status, _, _ in steps if status == "lost")
    over = []
    for (pid, index), n in failed_per_step.items():
        policy = registry.get(runs[pid]["type_name"]).retry
        if n > policy.max_attempts:
            over.append(f"{pid} step {index}: {n} failed attempts > max_attempts {policy.max_attempts}")
    for (pid, index), n in lost_per_step.items():
        policy = registry.get(runs[pid]["type_name"]).retry
        if n >= policy.max_lost:
            over.append(f"{pid} step {index}: lost {n} times (max_lost {policy.max_lost})")
    over += [f"{r['id']} failed as poisonous" for r in runs.values() if "poisonous" in r["error"]]
    blamed = [f"{p} step {i} {name}: {error[:100]}" for p, i, name, status, error in
              Step.objects.filter(status="failed").values_list("procedure_id", "index", "name", "status", "error")
              if "OperationalError" in error or "InterfaceError" in error]
    add("no attempt failed because the database went away", blamed)
    max_lost = max(lost_per_step.values(), default=0)
    add("retry counts within budget", over,
        f"{len(over)} (most failures of a step {max(failed_per_step.values(), default=0)}, "
        f"most lost {max_lost})")
    facts["lost_attempts"] = sum(lost_per_step.values())
    facts["failed_attempts"] = sum(failed_per_step.values())
    facts["lease_outcomes"] = dict(Lease.objects.values_list("outcome").annotate(n=Count("id")))

    # 8. the workers themselves: they carried on, said so once per outage, and never logged a traceback
    tracebacks, noisy = [], []
    for w in pool:
        for path, (born, died, frozen) in zip(w.logs, w.lives, strict=True):
            text = path.read_text(errors="replace") if path.exists() else ""
            if "Traceback" in text:
                tracebacks.append(f"{path.name}: {text.count('Traceback')} tracebacks")
            outages = frozen + sum(1 for t in report.database_faults
                                   if born <= t + report.fault_aftermath and (died is None or t <= died))
            warned = sum(1 for line in text.splitlines() if (" WARNING " in line or " ERROR " in line) and any(
                needle in line for needle in LOSS_MESSAGES))
            if warned > outages:
                noisy.append(f"{path.name}: {warned} warnings for {outages} outages")
    add("worker logs have no tracebacks", tracebacks)
    add("connection loss logged once per worker per outage", noisy)
    add("workers never exited on their own", report.unexpected_exits)
    add("workers stopped cleanly on SIGTERM", report.slow_shutdowns + [
        f"{name} exit {rc}" for name, rc in report.final_exit_codes.items() if rc != 0])
    add("quiescent within the bound", [] if quiescent else ["procedures still unfinished at the deadline"],
        "yes" if quiescent else "no")
    return checks, facts


def _key_overlaps(runs: dict[Any, dict[str, Any]], steps: list[tuple[Any, ...]]) -> list[str]:
    """Committed step intervals of procedures sharing a key, overlapping while one of them holds it exclusive.

    A parent lends its keys to its descendants, so ancestor/descendant pairs are not compared.
    """
    spans: dict[Any, tuple[Any, Any]] = {}
    for pid, _, _, status, started, finished in steps:
        if status == "done" and started is not None:
            lo, hi = spans.get(pid, (started, finished))
            spans[pid] = (min(lo, started), max(hi, finished))
    by_key: dict[str, list[tuple[Any, Any, Any, str]]] = defaultdict(list)
    for pid, r in runs.items():
        if pid in spans:
            for name, mode in r["lock_keys"]:
                by_key[name].append((*spans[pid], pid, mode))

    def lineage(pid: Any) -> set[Any]:
        found = set()
        while pid is not None:
            found.add(pid)
            pid = runs[pid]["parent_id"]
        return found

    bad = []
    for name, items in by_key.items():
        items.sort(key=lambda x: x[0])
        for i, (_, end, pid, mode) in enumerate(items):
            for other_start, _, other, other_mode in items[i + 1:]:
                if other_start >= end:
                    break
                if "exclusive" in (mode, other_mode) and pid not in lineage(other) and other not in lineage(pid):
                    bad.append(f"{name}: {pid} and {other}")
    return bad


def worker_log_facts(pool: list[SoakWorker]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    patterns = {
        "connection lost": "database connection lost",
        "connection restored": "database connection restored",
        "renewal timed out": "lease renewal timed out",
        "fenced out": "dropping this worker's result",
        "parked": "parked as failed",
        "swept": "its lease expired during step",
        "tracebacks": "Traceback",
    }
    for w in pool:
        for path in w.logs:
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace")
                for label, needle in patterns.items():
                    counts[label] += text.count(needle)
    return dict(counts)


def diagnose(path: Path, limit: int = 20) -> None:
    """Write what the unfinished procedures look like, with their keys and the open sessions, to ``path``."""
    from django.db import connection

    from django_procedures.models import KeyRequest, ProcedureRun

    lines = []
    fields = ("id", "type_name", "status", "step", "step_name", "parent_id", "root_id", "lock_keys", "keys_held",
              "waiting_for_keys", "pending_children", "run_at", "lease_token", "lease_owner", "attempt", "lost",
              "failures", "error")
    for row in ProcedureRun.objects.unfinished().values(*fields)[:limit]:
        lines.append(" ".join(f"{k}={row[k]!r}" for k in fields))
        for kr in KeyRequest.objects.filter(name__in=[n for n, _ in row["lock_keys"]]).values(
                "name", "procedure_id", "root_id", "mode", "granted", "requested_at"):
            lines.append(f"    key request {kr}")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid, application_name, state, wait_event_type, wait_event, xact_start, "
                       "left(query, 200) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid()")
        lines += [f"session {row}" for row in cursor.fetchall()]
        cursor.execute("SELECT locktype, relation::regclass, objid, mode, granted, pid FROM pg_locks "
                       "WHERE pid <> pg_backend_pid()")
        lines += [f"lock {row}" for row in cursor.fetchall()]
    path.write_text("\n".join(lines) + "\n")


def print_table(checks: list[Check]) -> None:
    width = max(len(c.name) for c in checks)
    vwidth = max(len(c.value) for c in checks)
    line = f"+-{'-' * width}-+-{'-' * vwidth}-+--------+"
    print(line)
    print(f"| {'invariant'.ljust(width)} | {'breaches'.ljust(vwidth)} | result |")
    print(line)
    for c in checks:
        print(f"| {c.name.ljust(width)} | {c.value.ljust(vwidth)} | {('ok' if c.ok else 'BREACH').ljust(6)} |")
    print(line)
    for c in checks:
        if not c.ok and c.detail:
            print(f"  {c.name}: {c.detail}")


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


@contextlib.contextmanager
def throwaway_cluster(port: int, keep: bool) -> Iterator[Cluster]:
    base = Path(tempfile.mkdtemp(prefix="procedures-soak-"))
    cluster = Cluster(base, port)
    try:
        cluster.create()
        yield cluster
    finally:
        if keep:
            log(f"kept: cluster {cluster.url} in {base}; stop it with: {cluster.stop_command()}")
        else:
            cluster.stop()
            shutil.rmtree(base, ignore_errors=True)


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
