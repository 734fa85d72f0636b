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
