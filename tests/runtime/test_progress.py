"""``ctx.progress()`` in-process (``drain`` and the executor on this connection): stored, throttled, fenced,
never failing a step; no write at all when a step does not report."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_procedures.models import ProcedureRun
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store import operations
from django_procedures.store import progress as store
from django_procedures.store.claim import claim
from django_procedures.testing import drain
from testproject.testapp.procedures import Reports, ThreeSteps

pytestmark = pytest.mark.django_db

T = datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)


def test_the_last_report_is_stored_and_read_through_the_handle():
    handle = Reports.submit({"reports": [[1, 3, "first"], [2, 3, "second"], [3, 3, "third"]]})
    assert handle.progress is None
    drain(now=T)
    assert handle.refresh().status == "done"
    # All within the first second of the claim: held back, the latest written with the completion.
    assert handle.progress == {"done": 3, "total": 3, "note": "third", "updated_at": T}


def test_reports_within_the_first_second_write_nothing_of_their_own():
    handle = Reports.submit({"reports": [[i, 100, f"row {i}"] for i in range(1, 101)]})
    (c,) = claim("t", type_names=[Reports.type_name], limit=1, lease_seconds=30)
    running = RunningClaim(c)
    with CaptureQueriesContext(connection) as captured:
        execute(running)
    writes = [q["sql"] for q in captured if q["sql"].startswith("UPDATE") and '"progress" =' in q["sql"]
              and '"step_name" =' not in q["sql"]]
    # 100 reports in far less than a second: the latest rides along with the checkpoint (test_progress_ride_along)
    assert running.progress.writes == len(writes) == 0
    assert handle.refresh().progress["done"] == 100


def test_one_write_per_interval_and_the_latest_report_is_never_lost(monkeypatch):
    from django_procedures.runtime import progress

    clock_now = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock_now[0])
    handle = Reports.submit({})
    (c,) = claim("t", type_names=[Reports.type_name], limit=1, lease_seconds=30)
    recorder = progress.ProgressRecorder(c)
    log = __import__("logging").LoggerAdapter(__import__("logging").getLogger("t"), {})

    recorder.report(1, 10, "", log)  # within the first second of the claim: held back
    clock_now[0] += 1.0
    recorder.report(2, 10, "", log)  # a second later: written
    recorder.report(3, 10, "", log)  # held back
    recorder.step_ended()  # the second has not passed: still held back
    assert (recorder.writes, handle.refresh().progress["done"]) == (1, 2)
    clock_now[0] += 1.0
    recorder.step_ended()  # now it has
    assert (recorder.writes, handle.refresh().progress["done"]) == (2, 3)
    recorder.report(4, 10, "", log)
    recorder.before_failure()  # an attempt failed: written at once
    assert (recorder.writes, handle.refresh().progress["done"]) == (3, 4)


def test_a_step_that_never_reports_writes_no_progress():
    handle = ThreeSteps.submit({})
    with CaptureQueriesContext(connection) as captured:
        drain()
    assert handle.refresh().status == "done" and handle.progress is None
    assert not [q for q in captured if '"progress" =' in q["sql"] or "progress_updated_at\" =" in q["sql"]]


def test_bad_reports_are_clamped_or_ignored_with_a_warning_never_failing_the_step(caplog):
    handle = Reports.submit({"reports": [["lots", None, ""], [5, 2, "x" * 1_000_000], [-1, "many", "ok"]]})
    with caplog.at_level(logging.WARNING, logger="django_procedures.procedure"):
        drain()
    assert handle.refresh().status == "done"
    assert handle.progress["done"] == 0 and handle.progress["total"] is None and handle.progress["note"] == "ok"
    said = " | ".join(r.getMessage() for r in caplog.records if r.name == "django_procedures.procedure")
    for words in ("got str 'lots': the report was ignored", "done (5) is more than total (2); stored as 2",
                  "a note is kept to 500 characters", "done must be 0 or more", "total must be a finite number"):
        assert words in said


def test_a_report_after_the_lease_moved_is_not_written():
    handle = Reports.submit({})
    (c,) = claim("t", type_names=[Reports.type_name], limit=1, lease_seconds=30)
    assert store.record(c, {"done": 1, "total": 2, "note": ""}, T)
    operations.cancel(handle.id)  # bumps the lease token
    assert not store.record(c, {"done": 2, "total": 2, "note": "late"}, T)
    assert ProcedureRun.objects.get(id=handle.id).progress == {"done": 1, "total": 2, "note": ""}
