"""What every benchmark needs: fresh databases, real worker processes, and the counters they are measured by.

The runner process is a Django process on ``benchmarks.settings``; its one
connection is pointed at each benchmark's own database in turn
(:func:`use_database`), the way pytest-django points it at a test database.
Workers are real ``manage.py procedures_worker`` subprocesses on the same
database, configured through ``PROCEDURES_JSON`` like the test suite's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlparse

import psycopg
from psycopg import sql as pgsql

ROOT = Path(__file__).resolve().parent.parent
MANAGE = ROOT / "manage.py"
CLK_TCK = os.sysconf("SC_CLK_TCK")
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/postgres"

#: Worker settings common to every benchmark: a short burst tail (timing never depends on it).
WORKER_SETTINGS: dict[str, Any] = {"BURST_WAIT_SECONDS": 0.3}


# --------------------------------------------------------------------------- the server and its databases


@dataclass(frozen=True)
class Server:
    """The PostgreSQL server the benchmarks create their databases on."""

    host: str
    port: int
    user: str
    password: str

    @classmethod
    def from_url(cls, url: str) -> Server:
        parsed = urlparse(url)
        if parsed.scheme not in ("postgres", "postgresql"):
            raise SystemExit(f"the benchmarks need PostgreSQL: give --database-url postgres://...; got {url!r}")
        return cls(parsed.hostname or "127.0.0.1", parsed.port or 5432, unquote(parsed.username or "postgres"),
                   unquote(parsed.password or ""))

    def url(self, dbname: str) -> str:
        password = f":{quote(self.password)}" if self.password else ""
        return f"postgres://{quote(self.user)}{password}@{self.host}:{self.port}/{quote(dbname)}"

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(host=self.host, port=self.port, user=self.user, password=self.password or None,
                               dbname=dbname, autocommit=True)

    def execute(self, statement: Any, params: Sequence[Any] | None = None, dbname: str = "postgres") -> list[Any]:
        with self.connect(dbname) as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def version(self) -> str:
        return self.execute("SHOW server_version")[0][0]

    def create(self, name: str, template: str | None = None) -> None:
        statement = pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name))
        if template:
            # FILE_COPY: a big seeded template is copied as files instead of being WAL-logged page by page.
            strategy = pgsql.SQL(" STRATEGY FILE_COPY") if self.major() >= 15 else pgsql.SQL("")
            statement = pgsql.SQL("CREATE DATABASE {} TEMPLATE {}{}").format(
                pgsql.Identifier(name), pgsql.Identifier(template), strategy)
        self.execute(statement)

    def drop(self, name: str) -> None:
        force = pgsql.SQL(" WITH (FORCE)") if self.major() >= 13 else pgsql.SQL("")
        self.execute(pgsql.SQL("DROP DATABASE IF EXISTS {}{}").format(pgsql.Identifier(name), force))

    def major(self) -> int:
        return int(self.version().split(".")[0])

    def xact_commit(self, dbname: str) -> int:
        """Committed transactions of ``dbname`` so far (read from another database, so this read adds none)."""
        return int(self.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [dbname])[0][0])

    def blocks_read(self, dbname: str) -> int:
        """Blocks ``dbname``'s backends read from outside shared buffers so far (from the OS cache or the disk)."""
        return int(self.execute("SELECT blks_read FROM pg_stat_database WHERE datname = %s", [dbname])[0][0])

    def wal_lsn(self) -> str:
        """The server's current WAL position (the whole server's: other databases' writes count too)."""
        return str(self.execute("SELECT pg_current_wal_lsn()")[0][0])

    def wal_since(self, lsn: str) -> int:
        """Bytes of WAL the server wrote since ``lsn``."""
        return int(self.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [lsn])[0][0])

    def backends(self, dbname: str) -> int:
        return int(self.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [dbname])[0][0])

    def wait_disconnected(self, dbname: str, timeout: float = 30.0) -> None:
        """Wait until no session is connected to ``dbname``: a backend flushes its statistics when it exits."""
        deadline = time.monotonic() + timeout
        while self.backends(dbname) and time.monotonic() < deadline:
            time.sleep(0.05)

    def listeners(self, dbname: str) -> int:
        """Sessions of ``dbname`` idle in LISTEN: one per started, idle worker."""
        return int(self.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND query ILIKE 'LISTEN %%'", [dbname])[0][0])

    def other_activity(self, exclude_prefix: str) -> str:
        """What else the server is doing: client sessions outside the benchmark's databases."""
        rows = self.execute(
            "SELECT count(*), count(*) FILTER (WHERE state = 'active') FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() "
            "AND coalesce(datname, '') NOT LIKE %s", [exclude_prefix + "%"])
        total, active = rows[0]
        return f"{total} other client sessions ({active} active)"


def use_database(name: str) -> None:
    """Point the runner's Django connection at ``name`` (closing whatever it had open)."""
    from django.db import connection, connections

    connections.close_all()
    connection.settings_dict["NAME"] = name


def close_connection() -> None:
    from django.db import connections

    connections.close_all()


class Databases:
    """Fresh databases for one runner invocation: names carry a common prefix; all are dropped at the end."""

    def __init__(self, server: Server, prefix: str) -> None:
        self.server = server
        self.prefix = prefix
        self.created: list[str] = []
        self._templates: dict[str, str] = {}

    def name(self, label: str) -> str:
        return f"{self.prefix}_{label}"[:63]

    def _create(self, name: str, template: str | None = None) -> str:
        self.server.drop(name)
        self.server.create(name, template)
        self.created.append(name)
        return name

    def migrated_template(self) -> str:
        """An empty, migrated database to copy fresh ones from (migrating each would take seconds)."""
        if "migrated" not in self._templates:
            from django.core.management import call_command

            name = self._create(self.name("template"))
            use_database(name)
            call_command("migrate", verbosity=0, interactive=False)
            close_connection()
            self._templates["migrated"] = name
        return self._templates["migrated"]

    def template(self, label: str, build: Any) -> str:
        """A migrated database that ``build()`` fills once (with the runner connected to it)."""
        if label not in self._templates:
            name = self._create(self.name(f"tmpl_{label}"), self.migrated_template())
            use_database(name)
            build()
            close_connection()
            self._templates[label] = name
        return self._templates[label]

    @contextmanager
    def fresh(self, label: str, template: str | None = None) -> Iterator[str]:
        """A new database copied from ``template`` (default: the migrated one), connected, dropped afterwards."""
        name = self._create(self.name(label), template or self.migrated_template())
        use_database(name)
        try:
            yield name
        finally:
            close_connection()
            self.server.drop(name)
            self.created.remove(name)

    def drop_all(self) -> None:
        close_connection()
        for name in reversed(self.created):
            self.server.drop(name)
        self.created.clear()


# --------------------------------------------------------------------------- worker processes


@dataclass
class Sample:
    rss_kb: int = 0
    hwm_kb: int = 0
    cpu: float = 0.0  # CPU seconds (user + system) so far


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far (``/proc/<pid>/stat`` utime + stime)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass
class Worker:
    """One ``procedures_worker`` subprocess."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    started: float  # time.time() just before it was spawned
    last: Sample = field(default_factory=Sample)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def sample(self) -> Sample:
        """Resident and peak resident memory and CPU time, from ``/proc`` (the last good read is kept)."""
        try:
            text = Path(f"/proc/{self.pid}/status").read_text()
            cpu = cpu_seconds(self.pid)
        except (OSError, ValueError):
            return self.last
        values = {}
        for line in text.splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0])
        if "VmRSS" in values:
            self.last = Sample(values["VmRSS"], values.get("VmHWM", values["VmRSS"]), cpu)
        return self.last

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def stop(self, timeout: float = 30.0) -> int:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


class Workers:
    """Worker subprocesses on one database, sampled for memory and CPU while they run; all stopped on exit.

    With ``server`` and ``dbname`` the CPU time of the PostgreSQL backends
    serving that database is sampled too (``/proc`` of the server processes,
    so only when PostgreSQL runs on this host and its processes are readable).
    """

    def __init__(self, url: str, log_dir: Path, *, profile: Path | None = None, server: Server | None = None,
                 dbname: str | None = None) -> None:
        self.url = url
        self.server = server
        self.dbname = dbname
        #: CPU seconds per PostgreSQL backend pid of ``dbname``, as last sampled.
        self.backend_cpu: dict[int, float] = {}
        self.log_dir = log_dir
        self.profile = profile
        self.started: list[Worker] = []
        self._profilers: list[subprocess.Popen[bytes]] = []
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample_loop, daemon=True)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self, count: int, *, concurrency: int, burst: bool, settings: dict[str, Any] | None = None,
              label: str = "w", args: Sequence[str] = (), env: dict[str, str] | None = None) -> list[Worker]:
        workers = [self._start_one(f"{label}{len(self.started) + 1}", concurrency, burst, settings, args, env)
                   for _ in range(count)]
        if not self._sampler.is_alive():
            self._sampler.start()
        return workers

    def _start_one(self, name: str, concurrency: int, burst: bool, settings: dict[str, Any] | None,
                   args: Sequence[str] = (), extra_env: dict[str, str] | None = None) -> Worker:
        env = dict(os.environ)
        env.update({
            "DATABASE_URL": self.url,
            "DJANGO_SETTINGS_MODULE": "benchmarks.settings",
            "PYTHONUNBUFFERED": "1",
            "PROCEDURES_JSON": json.dumps({**WORKER_SETTINGS, **(settings or {})}),
            "PROCEDURES_LOG": "INFO",
        })
        env.update(extra_env or {})  # last: the comparison with the peers names its own DJANGO_SETTINGS_MODULE
        command = [sys.executable, str(MANAGE), "procedures_worker", "--worker-id", name,
                   "--concurrency", str(concurrency)]
        if burst:
            command.append("--burst")
        command += list(args)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"worker-{name}-{int(time.time() * 1000)}.log"
        with open(log_path, "wb") as log:
            started = time.time()
            popen = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT)
        worker = Worker(name, popen, log_path, started)
        self.started.append(worker)
        if self.profile is not None:
            self._attach_profiler(worker)
        return worker

    def _attach_profiler(self, worker: Worker) -> None:
        """py-spy samples the worker until it exits (all threads, including idle ones)."""
        self.profile.mkdir(parents=True, exist_ok=True)
        base = self.profile / f"{worker.name}-{worker.pid}"
        command = ["py-spy", "record", "--pid", str(worker.pid), "--rate", "250", "--threads", "--idle",
                   "--format", "raw", "--output", f"{base}.txt", "--nonblocking"]
        spy = Path(sys.executable).with_name("py-spy")
        if spy.exists():
            command[0] = str(spy)
        time.sleep(0.3)  # let it exec the interpreter before attaching
        self._profilers.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def _sample_loop(self) -> None:
        tick = 0
        while not self._stop.wait(0.1):
            for w in self.started:
                if w.alive():
                    w.sample()
            tick += 1
            if self.server is not None and tick % 3 == 0:
                self._sample_backends()

    def _sample_backends(self) -> None:
        try:
            pids = [row[0] for row in self.server.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s", [self.dbname])]
        except Exception:  # the database may be going away
            return
        for pid in pids:
            try:
                self.backend_cpu[pid] = cpu_seconds(pid)
            except (OSError, ValueError):
                pass

    def worker_cpu(self) -> float:
        """CPU seconds the workers used (as last sampled, at most 0.1 s before each exited)."""
        return sum(w.last.cpu for w in self.started)

    def database_cpu(self) -> float | None:
        """CPU seconds the PostgreSQL backends of the workers' database used (None: not measurable here)."""
        return sum(self.backend_cpu.values()) if self.backend_cpu else None

    def wait_exit(self, workers: Sequence[Worker], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for w in workers:
            try:
                w.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise BenchmarkError(f"worker {w.name} still running after {timeout:.0f}s\n{self.logs()}") from None
            if w.popen.returncode != 0:
                raise BenchmarkError(f"worker {w.name} exited with {w.popen.returncode}\n{w.log()[-3000:]}")

    def wait_idle(self, server: Server, dbname: str, count: int, timeout: float = 60.0) -> None:
        """Wait until ``count`` workers sit in LISTEN (started, nothing to do)."""
        deadline = time.monotonic() + timeout
        while server.listeners(dbname) < count:
            if time.monotonic() > deadline:
                raise BenchmarkError(f"workers did not become idle within {timeout:.0f}s\n{self.logs()}")
            for w in self.started:
                if not w.alive():
                    raise BenchmarkError(f"worker {w.name} exited early\n{w.log()[-3000:]}")
            time.sleep(0.05)

    def stop_all(self) -> None:
        for w in self.started:
            if w.alive():
                w.popen.send_signal(signal.SIGTERM)
        for w in self.started:
            w.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {w.name} (pid {w.pid})\n{w.log()[-2000:]}" for w in self.started)

    def close(self) -> None:
        self.stop_all()
        self._stop.set()
        for p in self._profilers:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


class BenchmarkError(RuntimeError):
    """A benchmark could not produce its figure (a worker failed, work did not finish)."""


# --------------------------------------------------------------------------- reading results back


def wait_until_done(total: int, *, timeout: float, workers: Workers | None = None, interval: float = 0.1,
                    type_name: str | None = None) -> int:
    """Poll until ``total`` procedures (of ``type_name``, if given) are final; returns how many polls (each one a
    committed read) it took."""
    from django_procedures.models import ProcedureRun
    from django_procedures.policy.status import FINAL

    final = ProcedureRun.objects.filter(status__in=FINAL)
    if type_name is not None:  # beside a seeded history, count only the benchmark's own
        final = final.filter(type_name=type_name)
    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        polls += 1
        if final.count() >= total:
            return polls
        if time.monotonic() > deadline:
            logs = workers.logs() if workers else ""
            raise BenchmarkError(f"only {final.count()} of {total} procedures finished within {timeout:.0f}s\n{logs}")
        time.sleep(interval)


def finished_span(since: Any) -> tuple[int, float, float]:
    """``(count, first start, last finish)`` of the procedures created since ``since``, as epoch seconds.

    ``BenchmarkError`` if any of them did not end ``done``.
    """
    from django.db.models import Count, Max, Min, Q

    from django_procedures.models import ProcedureRun

    runs = ProcedureRun.objects.filter(created_at__gte=since).aggregate(
        n=Count("id"), bad=Count("id", filter=~Q(status="done")), first=Min("started_at"), last=Max("finished_at"))
    if runs["bad"]:
        raise BenchmarkError(f"{runs['bad']} of {runs['n']} procedures did not end done")
    if not runs["n"]:
        raise BenchmarkError("no procedures were found")
    return runs["n"], runs["first"].timestamp(), runs["last"].timestamp()


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in 0..100."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)
