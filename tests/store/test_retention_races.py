"""Pruning racing other transactions, each on its own connection (real PostgreSQL, threads).

A prune never deletes a run that has become active again: the tree's rows are
locked and their status re-read in the statement that deletes them. These tests
hold a row lock in the test's transaction, start the prune on a thread, wait
until it is blocked (or has skipped), and then let the other change commit.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction

from django_procedures import clock
from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.store import operations, retention
from tests.store.test_final_races import InThread, wait_blocked

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def old(status: str = "done", parent: ProcedureRun | None = None, **fields) -> ProcedureRun:
    at = clock.now() - timedelta(days=60)
    run = ProcedureRun._writer.create(type_name="x", status=status, run_at=at, finished_at=at, parent=parent,
                                      root=(parent.root or parent) if parent else None, **fields)
    Step._writer.create(procedure=run, index=0, name="a", attempt=1, status="done", started_at=at, finished_at=at)
    Lease._writer.create(procedure=run, token=1, worker="w", claimed_at=at, released_at=at, outcome="completed")
    return run


def cutoff():
    return clock.now() - timedelta(days=30)


def test_a_member_made_active_while_the_prune_waits_for_it_keeps_its_whole_tree():
    root = old("failed")
    child = old("failed", parent=root)
    other = old()  # a tree nobody touches: pruned in the same batch
    with transaction.atomic():
        # As an operator's retry would: the child's row is locked, and it will be ready when this commits.
        ProcedureRun._writer.select_for_update().get(id=child.id)
        pruning = InThread(lambda: retention.prune_batch(cutoff(), batch_size=10))
        wait_blocked(1, "the prune to wait for the child's row")
        ProcedureRun._writer.filter(id=child.id).update(status="ready", finished_at=None)
    batch = pruning.join()
    assert (batch.trees, batch.procedures, batch.steps, batch.leases) == (1, 1, 1, 1)
    assert set(ProcedureRun.objects.values_list("id", flat=True)) == {root.id, child.id}
    assert Step.objects.filter(procedure__in=[root, child]).count() == 2
    assert not ProcedureRun.objects.filter(id=other.id).exists()


def test_a_prune_skips_a_tree_whose_root_a_manual_retry_holds_and_never_deletes_it_afterwards():
    root = old("failed", failure_can_retry=True, error="boom")
    old(parent=root)
    locked, go = threading.Event(), threading.Event()

    def retry_held_open():
        with transaction.atomic():
            operations.retry(root.id, by="operator")
            locked.set()
            assert go.wait(60)

    retried = InThread(retry_held_open)
    assert locked.wait(60)
    assert retention.prune_batch(cutoff(), batch_size=10) == retention.PruneBatch()  # skipped, not waited for
    go.set()
    retried.join()
    assert retention.prune_batch(cutoff(), batch_size=10) == retention.PruneBatch()
    assert ProcedureRun.objects.get(id=root.id).status == "ready"
    assert ProcedureRun.objects.count() == 2 and Step.objects.count() == 2


def test_two_pruners_share_the_work_without_waiting_and_one_pass_at_a_time_with_the_lock():
    roots = [old() for _ in range(4)]
    with transaction.atomic():
        first = retention.prune_batch(cutoff(), batch_size=2, alone=True)
        # Another worker's pass, on its own connection, while this one's batch is open: it does nothing.
        assert InThread(lambda: retention.prune_batch(cutoff(), batch_size=2, alone=True)).join() is None
        # procedures_prune (not alone) skips the locked roots and takes the next ones.
        second = InThread(lambda: retention.prune_batch(cutoff(), batch_size=2)).join()
    assert first.trees == second.trees == 2
    assert not ProcedureRun.objects.filter(id__in=[r.id for r in roots]).exists()


def test_a_batch_of_its_own_commits_without_waiting_for_the_disk_and_leaves_a_callers_transaction_alone():
    # A crash may forget the last batches (their trees are pruned again later); a caller's writes stay durable.
    seen = []

    def watch(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if "DELETE FROM" in sql:
            seen.append(context["connection"].connection.execute("SHOW synchronous_commit").fetchone()[0])
        return result

    old()
    with connection.execute_wrapper(watch):
        assert retention.prune_batch(cutoff(), batch_size=10).trees == 1
        old()
        with transaction.atomic():
            assert retention.prune_batch(cutoff(), batch_size=10).trees == 1
    assert seen == ["off", "on"]
    assert not ProcedureRun.objects.exists()
