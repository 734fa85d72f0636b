"""The worker's retention chore, in-process: bounded passes, off with ``RETENTION=None``, one pruner at a time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction

from django_procedures import clock
from django_procedures.models import ProcedureRun, Worker
from django_procedures.policy.workers import StopReason
from django_procedures.runtime import retention
from django_procedures.runtime.chores import Chore
from django_procedures.store import retention as store_retention
from django_procedures.store import workers
from tests.store.test_final_races import InThread

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


class Batches:
    """``store.retention.prune_batch`` watched: the trees each batch asked for, and a clock for the pace.

    Each batch moves ``runtime.retention``'s monotonic clock on by ``per_tree`` seconds a tree it deleted (one
    tree's worth if none), as a database would that takes that long per tree: the pace is judged without wall time.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, per_tree: float) -> None:
        self.now, self.asked = 1000.0, []
        real = store_retention.prune_batch

        def prune_batch(cutoff, statuses=None, batch_size=500, **options):
            self.asked.append(batch_size)
            batch = real(cutoff, statuses, batch_size, **options)
            self.now += per_tree * max(batch.trees if batch else 0, 1)
            return batch

        monkeypatch.setattr(store_retention, "prune_batch", prune_batch)
        monkeypatch.setattr(retention, "monotonic", lambda: self.now)


@pytest.fixture(autouse=True)
def first_pace(monkeypatch):
    """Each test starts at the first batch's size: the worker's pace is kept from pass to pass."""
    monkeypatch.setattr(retention, "_pace", retention.Pace())


def finished(days_ago: float, status: str = "done") -> ProcedureRun:
    at = clock.now() - timedelta(days=days_ago)
    return ProcedureRun._writer.create(type_name="x", status=status, run_at=at, finished_at=at)


def test_a_pass_prunes_trees_older_than_retention_and_keeps_younger_and_unfinished_ones(settings):
    settings.PROCEDURES = {"RETENTION": "30d"}
    finished(31), finished(31, "cancelled")
    young = finished(29)
    waiting = ProcedureRun._writer.create(type_name="x", status="waiting", run_at=clock.now() - timedelta(days=90))
    assert retention.prune_pass() is None  # nothing left
    assert set(ProcedureRun.objects.values_list("id", flat=True)) == {young.id, waiting.id}


def test_the_default_retention_is_thirty_days(settings):
    settings.PROCEDURES = {}
    finished(31)
    kept = finished(29)
    retention.prune_pass()
    assert list(ProcedureRun.objects.values_list("id", flat=True)) == [kept.id]


def test_none_turns_retention_off(settings):
    settings.PROCEDURES = {"RETENTION": None}
    finished(3650)
    assert retention.prune_pass() is None
    assert ProcedureRun.objects.count() == 1


def test_a_pass_stops_after_its_time_and_says_more_is_left(settings, monkeypatch):
    settings.PROCEDURES = {"RETENTION": "1d"}
    monkeypatch.setattr(retention, "_pace", retention.Pace(2, seconds=None))  # 2 trees a batch, always
    monkeypatch.setattr(retention, "PASS_SECONDS", 0)  # one batch per pass
    for _ in range(5):
        finished(2)
    assert retention.prune_pass() == retention.BEHIND_SECONDS  # one batch of 2 trees; come back soon
    assert ProcedureRun.objects.count() == 3
    assert retention.prune_pass() == retention.BEHIND_SECONDS
    assert retention.prune_pass() is None
    assert not ProcedureRun.objects.exists()


def test_a_pass_does_nothing_while_another_worker_prunes(settings):
    settings.PROCEDURES = {"RETENTION": "1d"}
    finished(2)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended('django_procedures:retention', 0))")
        assert InThread(retention.prune_pass).join() is None
        assert ProcedureRun.objects.count() == 1
    assert retention.prune_pass() is None
    assert not ProcedureRun.objects.exists()


def test_once_the_trees_are_done_old_rows_of_stopped_workers_go_too(settings):
    settings.PROCEDURES = {"RETENTION": "1d"}
    row = workers.register(worker_id="old", hostname="h", pid=1, version="", queues=None, concurrency=1,
                           lease_seconds=30)
    workers.stop(row, StopReason.SIGTERM)
    Worker._writer.filter(id=row).update(last_seen_at=clock.now() - timedelta(days=2))
    retention.prune_pass()
    assert not Worker.objects.exists()


def test_a_slow_pass_waits_nine_times_as_long_as_it_took(settings, monkeypatch):
    settings.PROCEDURES = {"RETENTION": "1d"}
    monkeypatch.setattr(retention, "_pace", retention.Pace(1))
    Batches(monkeypatch, per_tree=3.0)  # the batch takes 3 s: the database is slow
    finished(2), finished(2)
    assert retention.prune_pass() == pytest.approx(27.0)


def test_after_a_batch_of_large_trees_the_next_takes_as_many_as_fit_in_its_time_even_in_the_next_pass(
        settings, monkeypatch):
    settings.PROCEDURES = {"RETENTION": "1d"}
    monkeypatch.setattr(retention, "_pace", retention.Pace(20))
    monkeypatch.setattr(retention, "PASS_SECONDS", 0)  # one batch per pass
    batches = Batches(monkeypatch, per_tree=0.01)  # 20 trees: 0.2 s, four times a batch's 0.05 s
    for _ in range(27):
        finished(2)
    assert retention.prune_pass() is not None and retention.prune_pass() is not None
    assert retention.prune_pass() is None
    assert batches.asked == [20, 5, 5]  # a quarter of the trees; then on time, so as many again
    assert not ProcedureRun.objects.exists()


def test_while_batches_are_quick_each_takes_twice_the_trees_of_the_last(settings, monkeypatch):
    settings.PROCEDURES = {"RETENTION": "1d"}
    monkeypatch.setattr(retention, "_pace", retention.Pace(2))
    batches = Batches(monkeypatch, per_tree=0.0001)
    for _ in range(20):
        finished(2)
    assert retention.prune_pass() is None
    assert batches.asked == [2, 4, 8, 16]  # 2 + 4 + 8 deleted, then the last 6 of the 16 asked for
    assert not ProcedureRun.objects.exists()


def test_a_chore_that_names_its_next_interval_runs_again_then():
    results = iter([0, None, True])
    chore = Chore("c", interval=600, run=lambda: next(results))
    chore.run_if_due()
    before = chore.next_at
    chore.run_if_due()  # due again at once: the run asked for 0 seconds
    assert chore.next_at > before + 500  # None: the ordinary interval
    chore.next_at = 0
    chore.run_if_due()
    assert chore.next_at > before + 500  # a bool is not a number of seconds


def test_the_pass_logs_what_it_pruned_once(settings, caplog):
    settings.PROCEDURES = {"RETENTION": "1d"}
    finished(2)
    with caplog.at_level("INFO", logger="django_procedures.worker"):
        retention.prune_pass()
        retention.prune_pass()  # nothing left: no line
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retention:")]
    assert line.startswith("retention: pruned 1 trees finished before ") and line.endswith(
        "(1 procedures, 0 steps, 0 leases)")


def test_the_documented_pace_of_the_pass():
    # docs/running-workers.md, "Retention that runs itself": a first batch of 500 trees, then batches of about
    # 0.05 s (at most 10,000 trees), passes of about 0.1 s, at least 1 s apart (nine times the pass) while old
    # trees remain, 60 s apart otherwise.
    assert (retention.BATCH_TREES, retention.BATCH_SECONDS, retention.MAX_BATCH_TREES, retention.PASS_SECONDS,
            retention.BUSY_SHARE, retention.BEHIND_SECONDS, retention.IDLE_SECONDS) == (
        500, 0.05, 10_000, 0.1, 0.1, 1.0, 60.0)
    from types import SimpleNamespace

    from django_procedures.runtime.worker import WorkerRuntime as WorkerLoop

    config = SimpleNamespace(sweep_seconds=5.0, stats_seconds=60.0, tick_seconds=1.0, with_scheduler=False)
    loop = SimpleNamespace(config=config, _log_stats=lambda *args: None)
    chore = {c.name: c for c in WorkerLoop._chores(loop)}["retention"]
    assert (chore.run, chore.interval, chore.first_run) == (retention.prune_pass, 60.0, True)
