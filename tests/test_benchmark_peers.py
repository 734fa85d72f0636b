"""The peer comparison's plumbing: finding the shared harness, reading its records, refusing bad options.

The comparison itself (``python -m benchmarks.run --peers``) installs the peers'
own virtualenv and runs for minutes; it is run on purpose, never in the suite.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import peers
from benchmarks.harness import BenchmarkError
from benchmarks.run import parse_args


def test_a_missing_harness_says_where_it_was_looked_for_and_what_to_set(tmp_path, monkeypatch):
    monkeypatch.setenv("PROCEDURES_PEERS_DIR", str(tmp_path))
    with pytest.raises(BenchmarkError) as raised:
        peers.source_dir()
    assert str(tmp_path) in str(raised.value)
    assert "set PROCEDURES_PEERS_DIR to the folder that holds it" in str(raised.value)


def test_the_harness_is_found_where_the_variable_points(tmp_path, monkeypatch):
    (tmp_path / "driver.py").write_text("")
    (tmp_path / "setup.sh").write_text("")
    monkeypatch.setenv("PROCEDURES_PEERS_DIR", str(tmp_path))
    assert peers.source_dir() == tmp_path.resolve()


def test_only_this_runs_records_of_the_peer_and_repetition_are_read(tmp_path):
    raw = tmp_path / "raw.jsonl"

    def record(tag, peer, rep, scenario, rate):
        return json.dumps({"tag": tag, "peer": peer, "rep": rep, "scenario": scenario, "n": 5000,
                           "command": "python w", "meta": {"peer_versions": {"dbos": "3.4.0", "Django": "6.1"}},
                           "result": {"jobs_per_s_active": rate, "jobs_per_s_wall": rate / 2}})

    raw.write_text("\n".join([
        record("other-", "dbos", 1, "thr-W2-p1ms", 1.0),
        record("mine-", "dbos", 2, "thr-W2-p1ms", 2.0),
        "not json",
        record("mine-", "dbos", 1, "thr-W2-p1ms", 300.0),
        record("mine-", "procrastinate", 1, "thr-W2-c4", 4.0),
    ]) + "\n")
    found = peers._records(raw, "mine-", "dbos", 1)
    assert list(found) == ["thr-W2-p1ms"]
    result = found["thr-W2-p1ms"]
    assert (peers.rate(result, "noop", True), peers.rate(result, "noop", False)) == (300.0, 150.0)
    assert result["versions"] == {"dbos": "3.4.0"}  # the peer's own packages only
    assert peers.rate({"steps_per_s_active": 650.0}, "steps10", True) == 650.0
    assert peers.rate({}, "noop", True) is None


def test_peers_options_are_checked(capsys):
    args = parse_args(["--peers"])
    assert (args.selected, args.peers_n, args.runs) == (["peers"], 5000, 3)
    assert parse_args(["--peers", "--quick"]).peers_n == 200
    with pytest.raises(SystemExit):
        parse_args(["--peers", "--peers-n", "5"])
    assert "--peers-n must be at least 10 (ten-step jobs take N/10); got 5" in capsys.readouterr().err


def test_the_expected_duration_grows_with_n_and_the_repetitions():
    assert peers.expected_seconds(5000, 3) == 3 * peers.expected_seconds(5000, 1)
    assert peers.expected_seconds(2000, 1) < peers.expected_seconds(5000, 1) < peers.expected_seconds(20000, 1)
