"""The hardbyte benchmark adapter (benchmarks/hardbyte) without its harness: it imports, submits and drains,
its samples carry the metrics the harness's guide requires, and the real process speaks the protocol."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import queue
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.hardbyte import adapter, telemetry
from benchmarks.hardbyte.procedures import QUEUE, BenchJob
from django_procedures.models import ProcedureRun
from django_procedures.testing import drain
from tests.runtime.processes import database_url

ROOT = Path(__file__).resolve().parents[1]
# The adapter reads PostgreSQL's clock and lease columns: its benchmark is a PostgreSQL benchmark.
pytestmark = pytest.mark.postgres

REQUIRED = {"claim_p50_ms", "claim_p95_ms", "claim_p99_ms", "enqueue_rate", "completion_rate", "queue_depth"}


@pytest.mark.django_db
def test_enqueue_then_drain_is_read_back_as_depth_completions_and_latency() -> None:
    assert adapter.enqueue(3, seq=0, work_ms=0, payload_bytes=16) == 3
    runs = ProcedureRun.objects.filter(type_name=BenchJob.type_name)
    assert sorted(r.state["seq"] for r in runs) == [0, 1, 2]
    assert {r.queue for r in runs} == {QUEUE}

    before = telemetry.read(None, settle=dt.timedelta(0))
    assert before.depth == 3
    drain(queues=[QUEUE])
    assert set(runs.values_list("status", flat=True)) == {"done"}

    after = telemetry.read(before.watermark - dt.timedelta(seconds=1), settle=dt.timedelta(0))
    assert after.depth == 0
    assert after.completed == 3
    assert after.p99 >= after.p50 >= 0.0


def test_samples_carry_every_required_metric_and_only_instance_0_reports_depth(monkeypatch) -> None:
    reading = telemetry.Reading(db_now=dt.datetime.now(dt.UTC), completed=5, watermark=dt.datetime.now(dt.UTC),
                                p50=1.0, p95=2.0, p99=3.0, depth=7)
    records = telemetry.samples(reading, completion_rate=5.0, enqueue_rate=6.0, target_rate=8.0, every_s=5.0)
    assert REQUIRED <= {r["metric"] for r in records}
    assert all(r["kind"] == r["subject_kind"] == "adapter" and r["system"] == "django-procedures" for r in records)
    # Unreachable database: still a completion_rate (0), never a made-up depth or latency.
    blind = {r["metric"]: r["value"] for r in telemetry.samples(None, completion_rate=9.0, enqueue_rate=1.0,
                                                                   target_rate=8.0, every_s=5.0)}
    assert blind["completion_rate"] == 0.0 and "queue_depth" not in blind and "claim_p99_ms" not in blind
    monkeypatch.setenv("BENCH_INSTANCE_ID", "1")
    replica = telemetry.samples(reading, completion_rate=5.0, enqueue_rate=6.0, target_rate=8.0, every_s=5.0)
    assert "queue_depth" not in {r["metric"] for r in replica}
    out = io.StringIO()
    telemetry.emit(replica[0], out)
    assert json.loads(out.getvalue())["instance_id"] == 1


def test_enqueue_tokens_are_read_from_the_harness_pacer_and_other_lines_ignored() -> None:
    tokens: queue.Queue[int | None] = queue.Queue()
    adapter.read_tokens(io.StringIO("ENQUEUE 3\nnoise\nENQUEUE x\nENQUEUE 0\nENQUEUE 128\n"), tokens)
    assert [tokens.get_nowait() for _ in range(3)] == [3, 128, None]


def test_a_bad_environment_is_refused_with_what_to_change(monkeypatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "mysql://x")
    with pytest.raises(SystemExit, match="DATABASE_URL must be a postgres:// URL"):
        adapter.Config.from_env()
    monkeypatch.setenv("DATABASE_URL", "postgres://u@h/db")
    monkeypatch.setenv("PRODUCER_RATE", "fast")
    with pytest.raises(SystemExit, match="PRODUCER_RATE must be a number"):
        adapter.Config.from_env()


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_the_adapter_process_enqueues_on_tokens_runs_them_and_exits_0_on_sigterm() -> None:
    env = {**os.environ, "DATABASE_URL": database_url(), "PRODUCER_PACING": "harness", "PRODUCER_RATE": "10",
           "WORKER_COUNT": "2", "HARDBYTE_WORKER_PROCESSES": "1", "SAMPLE_EVERY_S": "1", "JOB_WORK_MS": "0"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.hardbyte"], cwd=ROOT, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["kind"] == "descriptor" and first["event_tables"] == telemetry.EVENT_TABLES
        proc.stdin.write("ENQUEUE 4\nENQUEUE 1\n")
        proc.stdin.flush()
        runs = ProcedureRun.objects.filter(type_name=BenchJob.type_name)
        deadline = time.monotonic() + 120  # a loaded machine: the worker's start-up alone can take seconds
        while not (runs.count() == 5 and not runs.exclude(status="done").exists()):
            assert time.monotonic() < deadline, list(runs.values_list("status", flat=True))
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0
        metrics = {json.loads(line)["metric"] for line in out.splitlines() if line.strip()}
        assert metrics <= REQUIRED | {"producer_target_rate", "worker_restarts", "enqueue_errors"}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
