"""``runtime.health.Health`` (named checks, a clock passed in) and the probe server, in-process."""

import json
import urllib.error
import urllib.request

import pytest

from django_procedures.policy.health import Phase
from django_procedures.runtime.health import Health
from django_procedures.runtime.probes import ProbeServer


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_checks_age_from_their_last_report_and_count_from_when_added():
    clock = FakeClock()
    health = Health(clock=clock)
    health.add_check("loop", limit=10)
    clock.now += 9
    assert health.liveness().ok  # never reported yet: start-up gets the limit as grace
    clock.now += 2
    assert not health.liveness().ok
    health.report("loop")
    assert health.liveness().ok
    health.report("loop", at=clock.now - 100)  # an older report never moves a check back
    assert health.readings()[0].age == 0.0


def test_another_part_adds_a_named_check_of_its_own():
    clock = FakeClock()
    alive = [True]
    health = Health(clock=clock)
    health.add_check("loop", limit=10)
    health.add_check("event_loop", limit=5, alive=lambda: alive[0])
    alive[0] = False
    verdict = health.liveness()
    assert not verdict.ok
    assert verdict.as_dict()["checks"]["event_loop"]["reason"] == "the thread is not alive"
    health.remove_check("event_loop")
    assert health.liveness().ok


def test_a_limit_must_be_positive():
    with pytest.raises(ValueError, match="a health check's limit must be positive; got 0 for 'loop'"):
        Health().add_check("loop", limit=0)


def test_readiness_follows_the_phase():
    health = Health()
    assert health.readiness().status == 503
    health.running()
    assert health.readiness().status == 200
    health.stopping()
    health.running()  # a late first turn does not undo a stop
    assert (health.phase, health.readiness().status) == (Phase.STOPPING, 503)


def fetch(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_the_probe_server_answers_json_and_404s_metrics_without_prometheus():
    clock = FakeClock()
    health = Health(clock=clock)
    health.add_check("loop", limit=10)
    server = ProbeServer(health, "127.0.0.1", 0)
    try:
        status, body = fetch(server.port, "/readyz")
        assert (status, json.loads(body)["phase"]) == (503, "starting")
        health.running()
        assert fetch(server.port, "/readyz")[0] == 200
        assert fetch(server.port, "/healthz?verbose=1")[0] == 200
        clock.now += 11
        status, body = fetch(server.port, "/healthz")
        assert status == 503 and json.loads(body)["checks"]["loop"]["ok"] is False
        status, body = fetch(server.port, "/metrics")
        assert status == 404 and b"pip install 'django-procedures[prometheus]'" in body
    finally:
        server.close()


def test_a_port_in_use_is_an_os_error_that_says_so():
    first = ProbeServer(Health(), "127.0.0.1", 0)
    try:
        with pytest.raises(OSError, match=f"cannot serve metrics on 127.0.0.1:{first.port}: .*choose another"):
            ProbeServer(Health(), "127.0.0.1", first.port)
    finally:
        first.close()



def test_an_address_that_cannot_be_used_names_the_host_not_a_port_in_use():
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: the bind fails with EADDRNOTAVAIL, not EADDRINUSE.
    with pytest.raises(OSError, match=r"cannot serve metrics on 192\.0\.2\.1:0: .*check --metrics-host") as refused:
        ProbeServer(Health(), "192.0.2.1", 0)
    assert "another process" not in str(refused.value)

def test_a_stalled_event_loop_fails_liveness_naming_the_step_that_blocks_it():
    from django_procedures.runtime.loop_watch import LoopStall
    from django_procedures.runtime.worker_health import worker_health

    stall: list[LoopStall | None] = [None]
    health = worker_health(30.0, heartbeat_alive=lambda: True, loop_stall=lambda: stall[0])
    for name in ("loop", "database", "heartbeat"):
        health.report(name)
    assert health.liveness().ok
    stall[0] = LoopStall(1.5, "step fetch of shop.Charge (procedure 42)")
    verdict = health.liveness()
    assert not verdict.ok and verdict.status == 503
    check = verdict.as_dict()["checks"]["event_loop"]
    assert not check["ok"] and check["age_seconds"] == 1.5
    assert check["reason"].endswith("over the limit of 1s (blocked by step fetch of shop.Charge (procedure 42))")
    stall[0] = None
    assert health.liveness().ok


def test_a_worker_without_async_types_has_no_event_loop_check():
    from django_procedures.runtime.worker_health import worker_health

    health = worker_health(30.0, heartbeat_alive=lambda: True)
    assert "event_loop" not in health.liveness().as_dict()["checks"]
