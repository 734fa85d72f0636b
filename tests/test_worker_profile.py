"""``python -m benchmarks.worker_profile`` keeps working at a tiny size (its figures are not checked)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.runtime.processes import ROOT, database_url

pytestmark = [pytest.mark.subprocess, pytest.mark.postgres]


def test_worker_profile_prints_the_counts_and_where_the_time_goes():
    env = {**os.environ, "DATABASE_URL": database_url(), "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, "-m", "benchmarks.worker_profile", "--n", "30", "--top", "3"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "commits per procedure" in output and "statements per procedure" in output, output
    assert "Python calls per procedure" in output and "profiled CPU by package" in output, output
    assert "django_procedures.runtime.executor" in output, output
