"""Healthy and ready: pure decisions over the checks' ages (``policy.health``)."""

import math

import pytest

from django_procedures.policy.health import (
    Phase,
    Reading,
    check_limit,
    judge_check,
    liveness,
    longest_sleep,
    readiness,
)


@pytest.mark.parametrize(("reading", "ok", "reason"), [
    (Reading("loop", 0.0, 60.0), True, "current"),
    (Reading("loop", 60.0, 60.0), True, "current"),  # at the limit: still current
    (Reading("loop", 60.5, 60.0), False, "last reported 60.5s ago, over the limit of 60s"),
    (Reading("loop", None, 60.0), False, "never reported"),
    (Reading("loop", math.nan, 60.0), False, "last reported nans ago, over the limit of 60s"),
    (Reading("heartbeat", 1.0, 60.0, alive=False), False, "the thread is not alive"),
])
def test_a_check_is_current_while_alive_and_within_its_limit(reading, ok, reason):
    verdict = judge_check(reading)
    assert (verdict.ok, verdict.reason) == (ok, reason)


def test_liveness_needs_every_check_and_says_which_failed():
    verdict = liveness([Reading("loop", 130.0, 60.0), Reading("database", 1.0, 60.0)], Phase.RUNNING)
    assert (verdict.ok, verdict.status) == (False, 503)
    assert verdict.as_dict() == {"status": "unavailable", "phase": "running", "checks": {
        "loop": {"ok": False, "age_seconds": 130.0, "limit_seconds": 60.0,
                 "reason": "last reported 130.0s ago, over the limit of 60s"},
        "database": {"ok": True, "age_seconds": 1.0, "limit_seconds": 60.0, "reason": "current"}}}
    assert liveness([Reading("loop", 1.0, 60.0)], Phase.STOPPING).status == 200  # draining is alive


@pytest.mark.parametrize(("phase", "status"), [(Phase.STARTING, 503), (Phase.RUNNING, 200), (Phase.STOPPING, 503)])
def test_ready_only_while_running(phase, status):
    assert readiness(phase).status == status
    assert readiness(phase).as_dict() == {"status": "ok" if status == 200 else "unavailable",
                                          "phase": phase.value, "checks": {}}


def test_a_frozen_loop_is_seen_within_three_leases():
    lease = 30.0
    # The loop reports at least every longest_sleep; a frozen one fails once check_limit has passed.
    assert longest_sleep(lease) < check_limit(lease) < 3 * lease
