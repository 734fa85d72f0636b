"""The idle wait of the worker loop with nothing due (a regression: min() of one float raised TypeError,
which the loop logged as a database error and retried every 0.2 s instead of sleeping until its next chore)."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from django_procedures import clock
from django_procedures.runtime.worker import WorkerRuntime, resolve_config


@pytest.mark.django_db
def test_with_nothing_due_and_no_burst_the_worker_sleeps_until_its_next_chore() -> None:
    worker = WorkerRuntime(resolve_config(concurrency=1, lease_seconds=30))  # its threads are not started
    assert 4.0 < worker._idle_timeout(None, time.monotonic() + 5.0) <= 5.0
    assert worker._idle_timeout(clock.now() + dt.timedelta(seconds=1), time.monotonic() + 5.0) <= 1.0
    assert worker._idle_timeout(None, time.monotonic() - 1.0) == 0.0
