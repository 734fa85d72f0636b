"""The peer comparison's plumbing (``python -m benchmarks.run --peers``): its options, rates and expected duration.

The comparison itself installs the peers' own virtualenv and runs for minutes; it is run on
purpose, never in the suite.
"""

from __future__ import annotations

import pytest

from benchmarks import compare
from benchmarks.run import parse_args


def test_peers_alone_runs_the_comparison_and_its_options_are_checked(capsys):
    args = parse_args(["--peers"])
    assert (args.compare, args.selected, args.peers_n, args.runs) == (True, ["peers"], 5000, 3)
    assert parse_args(["--peers", "--quick"]).peers_n == 200
    with_only = parse_args(["--peers", "--only", "throughput"])  # each chosen benchmark beside its peer
    assert (with_only.compare, with_only.selected) == (False, ["throughput"])
    with pytest.raises(SystemExit):
        parse_args(["--peers", "--peers-n", "5"])
    assert "--peers-n must be at least 10 (ten-step jobs take N/10); got 5" in capsys.readouterr().err


def test_a_peer_rate_is_read_per_job_or_per_step():
    result = {"jobs_per_s_active": 300.0, "jobs_per_s_wall": 150.0, "steps_per_s_active": 650.0}
    assert (compare.rate(result, "noop", True), compare.rate(result, "noop", False)) == (300.0, 150.0)
    assert compare.rate(result, "steps10", True) == 650.0
    assert compare.rate({}, "noop", True) is None


def test_the_expected_duration_grows_with_n_and_the_repetitions():
    assert compare.expected_seconds(5000, 3) == 3 * compare.expected_seconds(5000, 1)
    assert compare.expected_seconds(2000, 1) < compare.expected_seconds(5000, 1) < compare.expected_seconds(20000, 1)


def test_celery_is_paired_on_its_three_scenarios_and_its_cost_is_given_in_redis_commands():
    celery = {(c.scenario, c.work) for c in compare.COMPARISONS if c.peer == "celery"}
    assert celery == {("thr-W2-c4", "noop"), ("thr-W2-prefork4", "noop"), ("steps10-W2-c4", "steps10")}
    steps = next(c for c in compare.COMPARISONS if c.peer == "celery" and c.work == "steps10")
    ours = compare.Ours(wall=900.0, active=1000.0, commits=1.05, rss_mb=57.0)
    theirs = {"steps_per_s_active": 500.0, "steps_per_s_wall": 300.0, "redis_calls_per_task": {"brpop": 1.0,
              "incr": 1.5}, "versions": {"celery": "5.7.0"}}
    text = compare.table([compare.Pairs(steps, [ours], [theirs])], 5000, 4)
    assert "| 1,000 | 500 | **2.00x** | 900 | 300 | 3.00x | 1 |" in text
    assert "celery `steps10-W2-c4`: 2.5 Redis commands per task (no PostgreSQL); versions celery 5.7.0." in text
