"""What every benchmark needs: fresh databases and the counters they are measured by (real worker processes:
``benchmarks.workers``).

The runner process is a Django process on ``benchmarks.settings``; its one
connection is pointed at each benchmark's own database in turn
(:func:`use_database`), the way pytest-django points it at a test database.
Workers are real ``manage.py procedures_worker`` subprocesses on the same
database, configured through ``PROCEDURES_JSON`` like the test suite's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlparse

import psycopg
from psycopg import sql as pgsql

if TYPE_CHECKING:
    from benchmarks.workers import Workers

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
