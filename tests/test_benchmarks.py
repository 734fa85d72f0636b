"""The benchmark suite keeps working: ``python -m benchmarks.run --quick`` (tiny sizes, one run) succeeds.

Its figures are not checked: benchmarks are run on purpose, never as timed
assertions. The runner makes and drops its own databases on the server the
test database lives on.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.runtime.processes import ROOT, database_url

pytestmark = [pytest.mark.subprocess, pytest.mark.postgres]


def test_quick_run_of_every_benchmark(tmp_path):
    results = tmp_path / "RESULTS.md"
    env = {**os.environ, "DATABASE_URL": database_url(), "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, "-m", "benchmarks.run", "--quick", "--results", str(results)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    text = results.read_text()
    for benchmark in ("1 throughput", "2 steps", "3 pickup", "4 backlog", "5 trees", "6 schedules", "7 memory",
                      "8 observability", "9 tasks", "10 fleet, direct", "11 retention", "12 history", "13 async",
                      "14 timers", "15 sleepers", "16 events", "17 limits"):
        assert f"| {benchmark} |" in text, output
    # The fleet's PgBouncer half runs where pgbouncer is installed, and says why not elsewhere.
    from benchmarks.pgbouncer import find_pgbouncer

    behind = "| 10 fleet, PgBouncer transaction mode" if find_pgbouncer() else "pgbouncer is not installed"
    assert behind in text, output
    assert "python -m benchmarks.run --quick" in text
    for version in ("Python", "Django", "PostgreSQL", "psycopg", "git"):
        assert f"{version} " in text
