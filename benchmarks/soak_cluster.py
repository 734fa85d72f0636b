"""The soak's cluster: the throwaway PostgreSQL server, the worker processes, and the faults sent to them.

``benchmarks/soak.py`` drives a run; ``benchmarks/soak_checks.py`` verifies what it left behind.
"""

from __future__ import annotations

import contextlib
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATABASE = "procedures_soak"
#: application_name prefix of worker connections (set by the worker; see runtime/worker.py).
WORKER_APP_PREFIX = "procedures-worker"


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------- the soak's shape


@dataclass(frozen=True)
class Profile:
    procedures: int
    seconds: float
    workers: int
    concurrency: int
    lease: float
    chaos_every: tuple[float, float]
    settle_seconds: float


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


