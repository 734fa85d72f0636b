"""``benchmarks.peers.run_peer`` drives a peer harness and reads its records back.

A stand-in harness (a ``driver.py`` that writes records as the real one does, and a
``setup.sh`` that makes its virtualenv a link to this interpreter) keeps this
fast and offline: the real harness installs its own virtualenv, so it never runs in CI.
"""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks.harness import BenchmarkError
from benchmarks.peers import run_peer

DRIVER = '''
import argparse, json, os, pathlib, sys
ap = argparse.ArgumentParser()
for name in ("--peer", "--rep", "--n", "--tag"):
    ap.add_argument(name)
ap.add_argument("--only", nargs="*")
a = ap.parse_args()
if a.peer == "broken":
    sys.exit("no such peer")
results = pathlib.Path("results")
results.mkdir(exist_ok=True)
with open(results / "raw.jsonl", "a") as f:
    for scenario in a.only:
        f.write(json.dumps({"tag": a.tag, "rep": int(a.rep), "peer": a.peer, "scenario": scenario,
                            "meta": {"host": os.environ["BENCH_PGHOST"]},
                            "result": {"n": int(a.n), "rep": int(a.rep)}}) + "\\n")
'''


@pytest.fixture
def harness(tmp_path, monkeypatch):
    source = tmp_path / "shared-peers"
    (source / "results").mkdir(parents=True)
    (source / "driver.py").write_text(DRIVER)
    (source / "setup.sh").write_text('mkdir -p .venv/bin && ln -s "$PEERS_TEST_PYTHON" .venv/bin/python\n')
    # An earlier run's record, of another tag: never read back.
    (source / "results" / "raw.jsonl").write_text(json.dumps({"tag": "old", "peer": "dtdb", "scenario": "thr-W2",
                                                              "result": {}}) + "\n")
    for path in [*source.rglob("*"), source]:
        path.chmod(0o555 if path.is_dir() else 0o444)  # kept read-only, as the shared copy is
    monkeypatch.setenv("BENCH_PEERS_HARNESS", str(source))
    monkeypatch.setenv("BENCH_PEERS_DIR", str(tmp_path / "copy"))
    monkeypatch.setenv("PEERS_TEST_PYTHON", sys.executable)
    yield tmp_path / "copy"
    for path in [source, *source.rglob("*")]:
        path.chmod(0o755)


def test_run_peer_calls_the_harness_driver_once_per_rep_and_returns_its_records(harness):
    out = run_peer("dtdb", ["thr-W2", "lat-W2"], 2000, 2, host="db.example")
    assert out["peer"] == "dtdb" and out["meta"] == {"host": "db.example"}
    assert out["scenarios"] == {name: [{"n": 2000, "rep": 1}, {"n": 2000, "rep": 2}]
                                for name in ("thr-W2", "lat-W2")}
    assert (harness / ".venv" / "bin" / "python").exists()  # set up once in the writable copy
    assert len(run_peer("dtdb", ["thr-W2"], 10, 1)["scenarios"]["thr-W2"]) == 1  # the copy is reused


def test_a_failing_harness_or_a_missing_one_is_an_error_that_says_where(harness, monkeypatch, tmp_path):
    with pytest.raises(BenchmarkError, match=r"(?s)the peer harness failed .*no such peer"):
        run_peer("broken", ["thr-W2"], 10, 1)
    with pytest.raises(ValueError, match="at least one scenario"):
        run_peer("dtdb", [], 10, 1)
    monkeypatch.setenv("BENCH_PEERS_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("BENCH_PEERS_HARNESS", str(tmp_path / "nothing-here"))
    with pytest.raises(BenchmarkError, match="set BENCH_PEERS_HARNESS"):
        run_peer("dtdb", ["thr-W2"], 10, 1)
