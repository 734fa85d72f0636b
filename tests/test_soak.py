"""The fault-injection soak, short version: ``python -m benchmarks.soak --quick`` must pass.

It makes its own throwaway PostgreSQL cluster (initdb, pg_ctl) on a free port,
so it needs the PostgreSQL server binaries, not the test database. About a
minute on an idle machine (1,000 procedures, 30 s of chaos); see
``benchmarks/soak.py`` and ``docs/guarantees.md``. Under ``make test-pgbouncer`` the workers go through a
PgBouncer of the soak's own in transaction mode, which is killed and restarted once (``--pgbouncer``).
"""

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.subprocess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_quick_soak_passes():
    from benchmarks.soak import find_bindir

    try:
        find_bindir()
    except SystemExit as error:
        pytest.skip(str(error))
    from tests.runtime.processes import pooler_url

    through_pgbouncer = ["--pgbouncer"] if pooler_url() else []
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "benchmarks.soak", "--quick", "--port", str(free_port()),
                             *through_pgbouncer],
                            cwd=ROOT, capture_output=True, text=True, timeout=1500)
    elapsed = time.monotonic() - started
    print(result.stdout[-6000:])
    print(f"quick soak: {elapsed:.0f}s")
    assert result.returncode == 0, result.stdout[-12000:] + result.stderr[-4000:]
    assert "soak passed" in result.stdout
    if through_pgbouncer:
        assert "PgBouncer restarts 1" in result.stdout
