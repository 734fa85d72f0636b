"""A rolling deploy with real workers: a worker of an older class version leaves newer runs to a newer worker."""

from __future__ import annotations

import pytest

from django_procedures.models import Lease, ProcedureRun
from testproject.testapp.procedures import Versioned
from tests.runtime.processes import wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


def test_an_old_worker_leaves_the_new_run_to_the_new_worker(workers):
    old_run = Versioned.submit()  # this process has version 1, like the old worker
    new_run = Versioned.submit()
    ProcedureRun._writer.filter(id=new_run.id).update(version=2)  # as submitted by code of version 2

    old = workers.start(env={"TESTAPP_PROCEDURE_VERSION": "1"}, procedures={"STATS_SECONDS": 0.5}, name="old")
    wait_for(lambda: old_run.refresh().status == "done", timeout=60, workers=workers, what="the old run")
    assert old_run.output == {"ran_by_version": 1}
    # It said so at start-up, and keeps counting it in its stats lines after it has no other work.
    wait_for(lambda: old.log_lines(level="WARNING", containing="were written by version 2, newer than version 1"),
             timeout=60, workers=workers, what="the old worker's warning")
    stats = len(old.log_lines(containing="newer-versions=testapp.Versioned:1"))
    wait_for(lambda: len(old.log_lines(containing="newer-versions=testapp.Versioned:1")) > stats, timeout=60,
             workers=workers, what="a stats line of the old worker after the old run finished")
    assert new_run.refresh().status == "ready"

    workers.start(env={"TESTAPP_PROCEDURE_VERSION": "2"}, name="new")
    wait_for(lambda: new_run.refresh().status == "done", timeout=60, workers=workers, what="the new run")
    assert new_run.output == {"ran_by_version": 2}
    assert list(Lease.objects.filter(procedure_id=new_run.id).values_list("worker", flat=True)) == ["new"]
    assert old.alive()
