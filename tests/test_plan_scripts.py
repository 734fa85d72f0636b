"""The query-plan scripts (``benchmarks.claim_plan``, ``admin_plans``, ``cli_plans``) keep running at a tiny size.

Their verdicts are not checked (a table of a few thousand rows is planned differently from ten million); what is
checked is that each still captures the statements it explains. ``claim_plan`` once found none: the claim's hot
statements moved onto ``store.db.bound_cursor``, past Django's execute wrappers, and the script raised.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.runtime.processes import ROOT, database_url

pytestmark = [pytest.mark.subprocess, pytest.mark.postgres]


CLAIM_CASES = ["(a0)", "(a1)", "(a2)", "(a3)", "(b1)", "(b2)", "(c)", "(d)"]


@pytest.mark.parametrize(("script", "sizes", "expected"), [
    ("claim_plan", ["--finished", "2000", "--due", "100", "--future", "100", "--running", "20", "--expired", "2"],
     [f"\n  {case}" for case in CLAIM_CASES] + ["dropped database"]),
    ("admin_plans", ["--rows", "2000"], ["Prometheus gauges"]),
    ("cli_plans", ["--rows", "2000"], ["procedures stats", "procedures schedules list"]),
])
def test_plan_script_explains_every_statement_it_names(script, sizes, expected):
    # A scratch database of this test run's own, which the script drops and re-creates.
    scratch = f"{os.environ.get('PROCEDURES_TEST_DB_NAME', 'test_procedures')}_plans_{os.getpid()}"
    url = database_url().rsplit("/", 1)[0] + "/" + scratch
    env = {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{script}", *sizes], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    for text in expected:
        assert text in output, output[-4000:]
