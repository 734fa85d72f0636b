"""``python -m benchmarks.startup`` times a burst worker's start-up stages (its figures are not checked)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks.startup import MARK, STAGES, parse_stamps, stage_times
from tests.runtime.processes import ROOT, database_url


def test_each_stage_is_timed_from_the_one_before_and_the_total_from_the_launch():
    stamps = {"launched": 10.0, "interpreter up": 10.02, "django.setup()": 10.2, "first claim": 10.3}
    times = stage_times(stamps)
    assert list(times) == ["interpreter up", "django.setup()", "first claim", "launch to first claim"]
    assert [round(v) for v in times.values()] == [20, 180, 100, 300]
    assert parse_stamps(f"some log line\n{MARK}{{\"launched\": 1.5}}\n") == {"launched": 1.5}
    with pytest.raises(ValueError, match="printed no stamps"):
        parse_stamps("Traceback ...")


@pytest.mark.subprocess
@pytest.mark.postgres
def test_startup_reaches_every_stage_in_a_real_worker():
    env = {**os.environ, "DATABASE_URL": database_url(), "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, "-m", "benchmarks.startup", "--runs", "1", "--workers", "1", "--n", "5"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    for stage in (*STAGES, "launch to first claim"):
        assert f"  {stage} " in output, output
