"""Real ``manage.py procedures_worker`` subprocesses for tests, and polling helpers.

Every worker started through a :class:`Workers` pool is killed (SIGKILL, even
when stopped with SIGSTOP) when the pool is closed, and its combined
stdout/stderr lives in a log file under the test's ``tmp_path`` so a failing
test can show what each worker said.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from django.db import connection

from django_procedures.runtime.connections import APPLICATION_NAME_PREFIX

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "manage.py"

T = TypeVar("T")


def database_url() -> str:
    """A DATABASE_URL naming the database this test runs on (pytest-django's test database)."""
    s = connection.settings_dict
    user = quote(s.get("USER") or "postgres")
    password = f":{quote(s['PASSWORD'])}" if s.get("PASSWORD") else ""
    host = s.get("HOST") or "127.0.0.1"
    port = s.get("PORT") or "5432"
    return f"postgres://{user}{password}@{host}:{port}/{quote(s['NAME'])}"


#: Set (``make test-pgbouncer``: ``postgres://postgres@127.0.0.1:6432``), worker subprocesses reach the test
#: database through this PgBouncer in transaction mode and LISTEN on a direct alias; the test process itself
#: stays on the direct connection, so that pytest-django can create and drop the test database.
POOLER_URL_VARIABLE = "PROCEDURES_TEST_POOLER_URL"


def pooler_url() -> str | None:
    return os.environ.get(POOLER_URL_VARIABLE) or None


def direct_only(why: str) -> Any:
    """Skip a test under ``make test-pgbouncer`` whose premise only holds for a direct connection."""
    import pytest

    return pytest.mark.skipif(pooler_url() is not None, reason=f"workers behind PgBouncer: {why}")


def worker_database_env() -> tuple[dict[str, str], dict[str, Any]]:
    """The environment and the ``PROCEDURES`` keys that point a worker subprocess at the test database.

    Directly, or (with :data:`POOLER_URL_VARIABLE` set) through PgBouncer in transaction mode: then the
    worker's default alias is the pooler, ``listen`` the direct database, and it says so in its settings.
    """
    direct = database_url()
    pooler = pooler_url()
    if pooler is None:
        return {"DATABASE_URL": direct}, {}
    through = pooler.rstrip("/") + "/" + direct.rsplit("/", 1)[1]
    return ({"DATABASE_URL": through, "LISTEN_DATABASE_URL": direct},
            {"POOLER": "pgbouncer-transaction", "LISTEN_DATABASE": "listen", "PREPARED_STATEMENTS": False})


class WorkerProcess:
    """One ``procedures_worker`` subprocess and its log file."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], log_path: Path, started: float) -> None:
        self.name = name
        self.popen = popen
        self.log_path = log_path
        self.started = started

    def __repr__(self) -> str:
        return f"<worker {self.name} pid={self.pid} rc={self.popen.poll()}>"

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def worker_id(self) -> str:
        """The ``--worker-id`` this worker writes into its leases (set by :meth:`Workers.start`)."""
        return self.name

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int:
        """Wait for the process to exit; ``AssertionError`` (with the log) if it does not in time."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {self.name} (pid {self.pid}) still running after {timeout}s\n"
                                 f"{self.describe()}") from None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_lines(self, *, level: str | None = None, containing: str = "") -> list[str]:
        """The worker's own log lines (not the command line written above them, whose paths may match)."""
        lines = [line for line in self.log().splitlines() if not line.startswith("$ ")]
        if level is not None:
            lines = [line for line in lines if f" {level} " in line]
        return [line for line in lines if containing in line]

    def final_count(self, name: str) -> int:
        """A count of the stats line the worker logs as it stops (``stopped: claimed=... given_back=...``)."""
        (line,) = self.log_lines(containing="stopped:")
        return int(line.split(f" {name}=")[1].split()[0])

    def describe(self) -> str:
        return f"----- log of {self!r} ({self.log_path}) -----\n{self.log()}-----"

    def kill_now(self) -> None:
        """SIGKILL (also works on a stopped process) and reap."""
        if self.popen.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not time out
            pass


class Workers:
    """Starts worker subprocesses for one test and kills whatever is left in :meth:`close`."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[WorkerProcess] = []

    def start(
        self,
        *args: str,
        lease_seconds: float | None = 2.0,
        procedures: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        drop_env: Iterable[str] = ("TESTAPP_EXTRA_TYPES",),
        name: str | None = None,
    ) -> WorkerProcess:
        """Start ``manage.py procedures_worker *args`` on the test database.

        ``procedures`` becomes the subprocess's ``PROCEDURES`` setting (via
        ``PROCEDURES_JSON``); ``lease_seconds`` is passed as ``--lease-seconds``
        unless None. Variables in ``drop_env`` are removed from the inherited
        environment before ``env`` is applied.
        """
        name = name or f"w{len(self.started) + 1}"
        worker_env = dict(os.environ)
        for key in drop_env:
            worker_env.pop(key, None)
        database_env, pooler_settings = worker_database_env()
        if env and "DATABASE_URL" in env:  # a database of the test's own (a throwaway cluster): reached directly
            database_env, pooler_settings = {}, {}
        worker_env.update({
            **database_env,
            "DJANGO_SETTINGS_MODULE": "testproject.settings",
            "PYTHONUNBUFFERED": "1",
            "PROCEDURES_JSON": json.dumps({**pooler_settings, **(procedures or {})}),
            "PROCEDURES_LOG": "INFO",
        })
        worker_env.update(env or {})
        command = [sys.executable, str(MANAGE), "procedures_worker", "--worker-id", name, *args]
        if lease_seconds is not None:
            command += ["--lease-seconds", str(lease_seconds)]
        log_path = self.tmp_path / f"worker-{name}.log"
        with open(log_path, "wb") as log:
            log.write(f"$ {' '.join(command)}\n".encode())
            log.flush()
            popen = subprocess.Popen(command, cwd=ROOT, env=worker_env, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT)
        worker = WorkerProcess(name, popen, log_path, time.monotonic())
        self.started.append(worker)
        return worker

    def describe(self) -> str:
        return "\n".join(w.describe() for w in self.started)

    def close(self) -> None:
        for worker in self.started:
            worker.kill_now()


def wait_for(
    predicate: Callable[[], T],
    *,
    timeout: float,
    what: str,
    workers: Workers | None = None,
    interval: float = 0.05,
) -> T:
    """Poll ``predicate`` until it returns something truthy; ``AssertionError`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            logs = f"\n{workers.describe()}" if workers is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{logs}")
        time.sleep(interval)


def worker_sessions(worker: WorkerProcess, role: str) -> list[int]:
    """Backend pids of the worker's connections whose role starts with ``role`` (see ``application_name``)."""
    with connection.cursor() as cursor:
        cursor.execute(_FRESH_ACTIVITY)
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name "
                       "LIKE %s", [f"{APPLICATION_NAME_PREFIX}/{role}%/{worker.worker_id}"])
        return [pid for (pid,) in cursor.fetchall()]


def session_state(pid: int) -> str:
    """The backend's state ('idle', 'idle in transaction', ...; '' once it is gone)."""
    with connection.cursor() as cursor:
        cursor.execute(_FRESH_ACTIVITY)
        cursor.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return (row[0] or "") if row else ""


def waits_for_a_lock(pid: int) -> bool:
    """Whether the backend waits for a lock (read live from ``pg_locks``, also inside a transaction)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted", [pid])
        return cursor.fetchone() is not None


#: Inside a transaction ``pg_stat_activity`` is a snapshot taken at its first read: a read must drop it first.
_FRESH_ACTIVITY = "SELECT pg_stat_clear_snapshot()"


def read_pid(path: Path) -> int | None:
    """The pid a test procedure wrote into its marker file, or None while it is missing or half-written."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None
