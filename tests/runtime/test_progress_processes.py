"""``ctx.progress()`` in a real worker on PostgreSQL: visible while the atomic step's transaction is open."""

from __future__ import annotations

import pytest

from django_procedures.models import ProcedureRun
from testproject.testapp.models import Effect
from testproject.testapp.procedures import Reports
from tests.runtime.processes import wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _postgres_only():
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL=postgres://...)")


def progress_of(pid):
    return ProcedureRun.objects.values_list("progress", flat=True).get(id=pid)


@pytest.mark.parametrize("fail", [False, True], ids=["done", "failed"])
def test_progress_is_visible_while_the_atomic_step_runs_and_the_last_report_is_never_lost(workers, tmp_path, fail):
    flag = tmp_path / "flag"
    handle = Reports.submit({"reports": [[1, 3, "first"], [2, 3, "second"]], "flag": str(flag), "fail": fail,
                             "after": [[3, 3, "last"]]})
    workers.start(lease_seconds=3)

    # Both reports came within the claim's first second: held back, then written by the heartbeat (every
    # lease / 3 = 1 s), the latest one, on the heartbeat's own connection.
    wait_for(lambda: progress_of(handle.id) == {"done": 2, "total": 3, "note": "second"}, timeout=60,
             workers=workers, what="the latest report while the step runs")
    # The step's own row (written before it waits) is not committed: its transaction is still open.
    assert Effect.objects.filter(procedure_id=handle.id).count() == 0
    assert handle.refresh().status == "running"

    flag.touch()  # the step reports "last" (held back: within a second of the last write) and ends
    wait_for(lambda: handle.refresh().status in ("done", "failed"), timeout=60, workers=workers,
             what="the procedure to end")
    assert handle.status == ("failed" if fail else "done")
    # Written with the completion, or at once when the attempt failed: never lost.
    assert (handle.progress["done"], handle.progress["note"]) == (3, "last")
    assert Effect.objects.filter(procedure_id=handle.id).count() == (0 if fail else 1)
