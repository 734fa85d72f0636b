"""``python -m benchmarks.tree_profile`` keeps working at a tiny size (its figures are not checked)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.runtime.processes import ROOT, database_url

pytestmark = [pytest.mark.subprocess, pytest.mark.postgres]


def test_tree_profile_prints_both_drains_with_their_counts():
    env = {**os.environ, "DATABASE_URL": database_url(), "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, "-m", "benchmarks.tree_profile", "--shapes", "2x3"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "run 1: flat 8 no-ops:" in output and "run 1: trees 2x3:" in output, output
    assert "commits/procedure" in output and "statements per procedure by kind:" in output, output
    assert "parent re-claim after its last child finished" in output, output
