"""A private PgBouncer in transaction mode, for the soak, the fleet benchmark and the fault tests.

It uses the same configuration as CI (``.ci/pgbouncer.ini``), written into a folder of the caller's in front
of any local PostgreSQL port, and runs Debian's ``pgbouncer`` as the ``postgres`` OS user when started as
root (PgBouncer refuses to run as root). :meth:`PgBouncer.kill` and :meth:`PgBouncer.start` restart it the
hard way: every client and server connection it had is cut.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / ".ci" / "pgbouncer.ini"
#: The settings a worker behind it needs besides its DATABASES (see docs/scaling.md).
WORKER_SETTINGS = {"POOLER": "pgbouncer-transaction", "LISTEN_DATABASE": "listen", "PREPARED_STATEMENTS": False}


def find_pgbouncer() -> str | None:
    """The pgbouncer binary, or None (``apt-get install pgbouncer`` provides /usr/sbin/pgbouncer)."""
    return shutil.which("pgbouncer") or (str(Path("/usr/sbin/pgbouncer")) if Path("/usr/sbin/pgbouncer").exists()
                                         else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgBouncer:
    """One PgBouncer process in front of ``127.0.0.1:server_port``, listening on ``port``."""

    def __init__(self, base: Path | None = None, *, server_port: int, port: int | None = None,
                 pool_size: int = 20) -> None:
        """``base`` holds its configuration, log and pid file; None: a temporary folder, removed by :meth:`remove`."""
        binary = find_pgbouncer()
        if binary is None:
            raise SystemExit("pgbouncer is not installed: apt-get install pgbouncer (or .ci/pgbouncer start)")
        self.binary = binary
        # The postgres user must reach the folder: pytest's tmp_path under root's 0700 folders will not do.
        self._temporary = base is None
        self.base = Path(tempfile.mkdtemp(prefix="procedures-pgbouncer-")) if base is None else base
        self.port = port or free_port()
        self.server_port = server_port
        self.pool_size = pool_size
        self.ini = self.base / "pgbouncer.ini"
        self._as_postgres = os.geteuid() == 0

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{quote(database)}"

    def _write_config(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        text = (TEMPLATE.read_text().replace("@VAR@", str(self.base)).replace("@SERVER_PORT@", str(self.server_port))
                .replace("@PORT@", str(self.port)).replace("@POOL_SIZE@", str(self.pool_size)))
        self.ini.write_text(text)
        (self.base / "userlist.txt").write_text('"postgres" ""\n')
        if self._as_postgres:
            entry = pwd.getpwnam("postgres")
            for path in (self.base, self.ini, self.base / "userlist.txt", *self.base.glob("pgbouncer.*")):
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def _answers(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="pgbouncer",
                                 autocommit=True, connect_timeout=2) as conn:
                conn.execute("SHOW VERSION")
            return True
        except psycopg.Error:
            return False

    def start(self, timeout: float = 10.0) -> None:
        self._write_config()
        command = [self.binary, "-d", str(self.ini)]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stdout}{done.stderr}"
                               f"\n{self.log_tail()}")
        deadline = time.monotonic() + timeout
        while not self._answers():
            if time.monotonic() > deadline:
                raise RuntimeError(f"PgBouncer did not come up on port {self.port}:\n{self.log_tail()}")
            time.sleep(0.1)

    def pid(self) -> int | None:
        try:
            return int((self.base / "pgbouncer.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def _signal_and_wait(self, sig: int, timeout: float = 10.0) -> None:
        pid = self.pid()
        if pid is None:
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        (self.base / "pgbouncer.pid").unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL: every client and server connection is cut at once, as when its host fails."""
        self._signal_and_wait(signal.SIGKILL)

    def remove(self) -> None:
        """Kill it, and remove its folder if it made a temporary one."""
        self.kill()
        if self._temporary:
            shutil.rmtree(self.base, ignore_errors=True)

    def restart(self) -> float:
        """Kill it and start it again on the same port; returns the seconds it was away."""
        started = time.monotonic()
        self.kill()
        self.start()
        return time.monotonic() - started

    def stop(self) -> None:
        self._signal_and_wait(signal.SIGINT)

    def admin(self, command: str) -> list[tuple]:
        """A command of PgBouncer's admin console (``SHOW POOLS``, ``SHOW SERVERS``...), its rows."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="pgbouncer",
                             autocommit=True) as conn:
            cursor = conn.execute(command)
            return cursor.fetchall() if cursor.description else []

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join((self.base / "pgbouncer.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
