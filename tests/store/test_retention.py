from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.testing import drain
from testproject.testapp.procedures import Refuses, ThreeSteps
from tests.runtime.test_retention_pass import Batches

pytestmark = pytest.mark.django_db
NOW = datetime(2030, 6, 1, tzinfo=UTC)


def finished(days_ago, status="done", parent=None):
    at = NOW - timedelta(days=days_ago)
    return ProcedureRun._writer.create(type_name="x", status=status, run_at=at, finished_at=at, parent=parent,
                                       root=(parent.root or parent) if parent else None)


def prune(*args):
    out = StringIO()
    from django_procedures import clock

    with clock.frozen_at(NOW):
        call_command("procedures_prune", *args, stdout=out)
    return out.getvalue()


def test_prunes_whole_old_trees_with_their_steps_and_leases():
    handle = ThreeSteps.submit(run_after=NOW - timedelta(days=10))
    drain(now=NOW - timedelta(days=10))
    assert Step.objects.count() == 3 and Lease.objects.count() == 1
    old_root = finished(9)
    finished(9, parent=finished(9, parent=old_root))  # grandchild
    recent = finished(1)
    output = prune("--older-than", "7d")
    assert "pruned 2 trees" in output
    assert list(ProcedureRun.objects.values_list("id", flat=True)) == [recent.id]
    assert not Step.objects.exists() and not Lease.objects.exists()
    assert not ProcedureRun.objects.filter(id=handle.id).exists()


def test_never_prunes_a_tree_with_an_unfinished_member():
    root = finished(30, status="failed")
    ProcedureRun._writer.create(type_name="x", status="running", run_at=NOW, parent=root, root=root)
    assert "pruned 0 trees" in prune("--older-than", "7d")
    assert ProcedureRun.objects.count() == 2


def test_status_filter_and_dry_run():
    finished(30, status="done")
    failed = finished(30, status="failed")
    assert "would delete 1 trees" in prune("--older-than", "7d", "--status", "done", "--dry-run")
    assert ProcedureRun.objects.count() == 2
    prune("--older-than", "7d", "--status", "done")
    assert list(ProcedureRun.objects.values_list("id", flat=True)) == [failed.id]


def test_batches_print_progress_with_the_rate_and_what_remains(monkeypatch):
    from django_procedures.management.commands import procedures_prune

    monkeypatch.setattr(procedures_prune, "PROGRESS_SECONDS", 0)
    for _ in range(5):
        finished(30)
    output = prune("--older-than", "7d", "--batch-size", "2")
    assert output.startswith("5 trees finished before 2030-05-25 00:00:00 UTC to prune")
    lines = [line for line in output.splitlines() if line.startswith("deleted")]
    assert len(lines) == 3 and "procedures/s" in lines[0]
    assert [line.rsplit("about ", 1)[1] for line in lines] == [f"{n} trees remaining" for n in (3, 1, 0)]
    assert "pruned 5 trees" in output


def many_finished(n, days_ago=30):
    at = NOW - timedelta(days=days_ago)
    ProcedureRun._writer.bulk_create(ProcedureRun(type_name="x", status="done", run_at=at, finished_at=at)
                                     for _ in range(n))


def test_batches_take_as_many_trees_as_fit_in_a_batch_time_after_the_first(monkeypatch):
    many_finished(600)
    batches = Batches(monkeypatch, per_tree=0.001)  # 500 trees: 0.5 s, ten times a batch's 0.05 s
    assert "pruned 600 trees" in prune("--older-than", "7d")
    assert batches.asked == [500, 50, 50, 50]  # the last finds none left


def test_a_batch_size_given_stays_whatever_the_pace(monkeypatch):
    many_finished(600)
    batches = Batches(monkeypatch, per_tree=0.001)
    assert "pruned 600 trees" in prune("--older-than", "7d", "--batch-size", "200")
    assert batches.asked == [200, 200, 200, 200]


def test_without_a_retention_the_command_needs_an_age(settings):
    finished(30)
    settings.PROCEDURES = {"RETENTION": None}
    with pytest.raises(CommandError, match=r"RETENTION'\] is None .*give the age to prune with --older-than"):
        prune()
    assert "pruned 1 trees" in prune("--older-than", "7d")


def test_prunes_lock_key_rows_and_counts_every_member():
    from django_procedures.models import KeyRequest

    root = finished(30)
    child = finished(30, parent=root)
    KeyRequest._writer.create(name="k", procedure=child, root=root, mode="exclusive", granted=False,
                              requested_at=NOW - timedelta(days=30))
    Step._writer.create(procedure=child, index=0, name="a", attempt=1, status="done", finished_at=NOW)
    output = prune("--older-than", "7d")
    assert "pruned 1 trees" in output and "(2 procedures, 1 steps, 0 leases" in output
    assert not KeyRequest.objects.exists() and not ProcedureRun.objects.exists()


def test_retention_setting_is_the_default_age(settings):
    finished(3)
    settings.PROCEDURES = {"RETENTION": "2d"}
    assert "pruned 1 trees" in prune()


@pytest.mark.parametrize(("args", "message"), [
    (["--older-than", "soon"], "cannot read 'soon' as a duration"),
    (["--status", "running"], "accepts only final statuses"),
])
def test_bad_arguments_say_what_to_change(args, message):
    with pytest.raises(CommandError, match=message):
        prune(*args)


def test_unfinished_procedures_are_never_touched():
    Refuses.submit()  # ready
    prune("--older-than", "1s")
    assert ProcedureRun.objects.count() == 1


def test_prunes_old_rows_of_stopped_and_gone_workers_never_live_ones():
    from django_procedures.models import Worker
    from django_procedures.policy.workers import StopReason
    from django_procedures.store import workers

    def start(name):
        return workers.register(worker_id=name, hostname="h", pid=1, version="", queues=None, concurrency=1,
                                lease_seconds=30)

    old_stopped, old_gone, recent_stopped, alive = start("old-stopped"), start("old-gone"), start("recent"), start("a")
    workers.stop(old_stopped, StopReason.SIGTERM)
    workers.stop(recent_stopped, StopReason.BURST)
    long_ago = NOW - timedelta(days=30)
    Worker._writer.filter(id__in=[old_stopped, old_gone]).update(last_seen_at=long_ago)
    # Gone: its renewal window closed (judged on the database's clock, which drain/tick's `now` does not move).
    Worker._writer.filter(id=old_gone).update(alive_until=datetime.now(UTC) - timedelta(minutes=1))
    Worker._writer.filter(id=recent_stopped).update(last_seen_at=NOW - timedelta(days=1))
    # Seen long ago by the recorded clock, but its renewal window (database clock) is still open: alive.
    Worker._writer.filter(id=alive).update(last_seen_at=long_ago)

    assert "would delete 2 worker rows" in prune("--older-than", "7d", "--dry-run")
    assert Worker.objects.count() == 4
    assert "and 2 worker rows" in prune("--older-than", "7d")
    assert sorted(Worker.objects.values_list("worker_id", flat=True)) == ["a", "recent"]
