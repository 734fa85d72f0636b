"""``procedures_worker --metrics-port``: Prometheus counters of a real worker; a port in use stops it at once."""

from __future__ import annotations

import signal
import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from django_procedures.models import ProcedureRun
from testproject.testapp.procedures import Refuses, ThreeSteps
from tests.runtime.processes import wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, tuple], float] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_worker_counts_steps_outcomes_claims_and_pickup_delay(workers):
    for _ in range(3):
        ThreeSteps.submit({})
    Refuses.submit({})
    port = free_port()
    w = workers.start("--metrics-port", str(port), lease_seconds=5)  # no --metrics-host: the loopback default
    wait_for(lambda: not ProcedureRun.objects.unfinished().exists(), timeout=60, workers=workers,
             what="every procedure to finish")
    # The address the server is bound to: unauthenticated metrics stay on this host unless asked otherwise.
    assert w.log_lines(containing=f"serving Prometheus metrics at http://127.0.0.1:{port}/metrics")

    def finished():
        got = scrape(port)
        return got if got and got.get(("django_procedures_claims_total", ())) == 4 and got.get(
            ("django_procedures_procedures_finished_total", (("status", "failed"), ("type", "testapp.Refuses")))
        ) == 1 else None

    got = wait_for(finished, timeout=60, workers=workers, what="the metrics to count every procedure")
    three = "testapp.ThreeSteps"
    assert got[("django_procedures_steps_total", (("outcome", "done"), ("type", three)))] == 9
    assert got[("django_procedures_steps_total", (("outcome", "failed"), ("type", "testapp.Refuses")))] == 1
    assert got[("django_procedures_procedures_finished_total", (("status", "done"), ("type", three)))] == 3
    assert got[("django_procedures_step_duration_seconds_count", (("type", three),))] == 9
    assert got[("django_procedures_pickup_delay_seconds_count", ())] == 4
    assert got[("django_procedures_leases_lost_total", ())] == 0
    assert got[("django_procedures_fenced_writes_total", ())] == 0
    assert got[("django_procedures_busy_threads", ())] == 0
    w.signal(signal.SIGTERM)
    assert w.wait(30) == 0


def test_a_metrics_port_in_use_is_said_and_the_worker_exits_non_zero(workers):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        w = workers.start("--metrics-port", str(port), "--metrics-host", "127.0.0.1", lease_seconds=5)
        assert w.wait(60) != 0
    assert f"cannot serve metrics on 127.0.0.1:{port}" in w.log()
    assert "choose another with --metrics-port" in w.log()
