"""``/healthz`` and ``/readyz`` of a real worker: a frozen main loop, a SIGTERM drain, no prometheus-client."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from django_procedures.models import ProcedureRun
from testproject.testapp.faults import BlocksTheLoop
from testproject.testapp.procedures import NonAtomicSteps, ThreeSteps
from tests.runtime.processes import wait_for
from tests.runtime.test_metrics_processes import free_port

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

LEASE = 2.0


def get(port: int, path: str) -> tuple[int, str] | None:
    """``(status, body)`` of ``GET path``, or None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return None


def probe(port: int, path: str) -> tuple[int, dict] | None:
    got = get(port, path)
    return None if got is None else (got[0], json.loads(got[1]))


def answers(port: int, path: str, status: int):
    """A predicate for ``wait_for``: the JSON body once ``path`` answers ``status``."""
    def check():
        got = probe(port, path)
        return got[1] if got is not None and got[0] == status else None
    return check


def test_a_frozen_main_loop_turns_healthz_to_503_and_back_once_it_moves(workers, tmp_path):
    lease = 5.0
    port = free_port()
    w = workers.start("--metrics-port", str(port), lease_seconds=lease, env={"TESTAPP_BLOCK_THE_LOOP": "1"})
    body = wait_for(answers(port, "/healthz", 200), timeout=60, workers=workers, what="/healthz to answer 200")
    # The test project has async def steps, so its workers run an event loop: its check has its own limit.
    assert set(body["checks"]) == {"loop", "database", "heartbeat", "event_loop"}
    assert body["checks"]["event_loop"] == {"ok": True, "age_seconds": 0.0, "limit_seconds": 1.0, "reason": "current"}
    assert all(c["ok"] and c["limit_seconds"] == 2 * lease for n, c in body["checks"].items() if n != "event_loop")
    ready = wait_for(answers(port, "/readyz", 200), timeout=60, workers=workers, what="/readyz to answer 200")
    assert ready["phase"] == "running"
    # Idle past the limit (LISTEN: nothing wakes it): the loop still turns, at least every lease / 2.
    time.sleep(3 * lease)
    status, body = probe(port, "/healthz")
    assert status == 200, body

    # The signal receiver runs on the main loop, after the claim commits: the loop stops turning, while the
    # heartbeat and the HTTP server threads go on.
    release = tmp_path / "release"
    BlocksTheLoop.submit({"release": str(release)})
    body = wait_for(answers(port, "/healthz", 503), timeout=60, workers=workers, what="/healthz to answer 503")
    loop = body["checks"]["loop"]
    assert not loop["ok"] and loop["age_seconds"] >= loop["limit_seconds"] == 2 * lease  # the age is rounded to 0.1 s
    assert "over the limit" in loop["reason"]
    assert body["checks"]["heartbeat"]["ok"] and body["checks"]["database"]["ok"]  # only the loop is stuck
    assert body["status"] == "unavailable"
    assert w.alive()

    release.write_text("go")
    wait_for(answers(port, "/healthz", 200), timeout=60, workers=workers, what="/healthz to recover")
    wait_for(lambda: ProcedureRun.objects.filter(status="done").exists(), timeout=60, workers=workers,
             what="the procedure to finish")
    w.signal(signal.SIGTERM)
    assert w.wait(60) == 0


def test_readyz_is_503_while_the_worker_drains_after_sigterm(workers, tmp_path):
    port = free_port()
    gate, marker = tmp_path / "gate", tmp_path / "marker"
    NonAtomicSteps.submit({"marker": str(marker), "until": {"fetch": str(gate)}})
    w = workers.start("--metrics-port", str(port), "--shutdown-timeout", "120", lease_seconds=LEASE)
    wait_for(answers(port, "/readyz", 200), timeout=60, workers=workers, what="/readyz to answer 200")
    wait_for(Path(f"{marker}.fetch").exists, timeout=60, workers=workers, what="step fetch to start")

    w.signal(signal.SIGTERM)
    body = wait_for(answers(port, "/readyz", 503), timeout=60, workers=workers, what="/readyz to answer 503")
    assert body == {"status": "unavailable", "phase": "stopping", "checks": {}}
    # Draining is not a failure: liveness stays 200 past the check limit while the step finishes.
    wait_for(lambda: w.log_lines(containing="shutting down"), timeout=30, workers=workers, what="the drain")
    until = time.monotonic() + 3 * 2 * LEASE  # three times the checks' limit
    while time.monotonic() < until:
        status, health = probe(port, "/healthz")
        assert status == 200, health
        assert health["phase"] == "stopping"
        time.sleep(0.5)
    assert w.alive()
    gate.write_text("go")
    assert w.wait(60) == 0
    assert ProcedureRun.objects.get().status in ("ready", "done")  # released after step fetch, or finished


def test_without_prometheus_client_the_worker_serves_health_and_metrics_is_404(workers, tmp_path):
    # A sitecustomize on the worker's PYTHONPATH makes `import prometheus_client` fail, as on an install
    # without the [prometheus] extra.
    blocker = tmp_path / "no_prometheus"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['prometheus_client'] = None\n")
    port = free_port()
    w = workers.start("--metrics-port", str(port), lease_seconds=LEASE, env={"PYTHONPATH": str(blocker)})
    wait_for(answers(port, "/healthz", 200), timeout=60, workers=workers, what="/healthz to answer 200")
    wait_for(answers(port, "/readyz", 200), timeout=60, workers=workers, what="/readyz to answer 200")
    status, text = get(port, "/metrics")
    assert status == 404
    assert "pip install 'django-procedures[prometheus]'" in text
    assert w.log_lines(level="WARNING", containing="serving /healthz and /readyz only")
    assert not w.log_lines(containing="serving Prometheus metrics")
    assert w.log_lines(containing=f"serving health probes at http://127.0.0.1:{port}/healthz")
    ThreeSteps.submit({})
    wait_for(lambda: ProcedureRun.objects.filter(status="done").exists(), timeout=60, workers=workers,
             what="the worker to run a procedure")
    w.signal(signal.SIGTERM)
    assert w.wait(60) == 0


def test_with_prometheus_client_metrics_and_health_share_the_port(workers):
    port = free_port()
    w = workers.start("--metrics-port", str(port), lease_seconds=LEASE)
    # Ready: past start-up, so its SIGTERM handler is installed (the server answers before that).
    wait_for(answers(port, "/readyz", 200), timeout=60, workers=workers, what="/readyz to answer 200")
    status, text = get(port, "/metrics")
    assert status == 200 and "django_procedures_claims_total" in text
    assert get(port, "/nothing-here")[0] == 404
    w.signal(signal.SIGTERM)
    assert w.wait(60) == 0
