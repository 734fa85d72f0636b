"""The keys to a run (a Step's, a Lease's, a KeyRequest's, a child's parent and root) are not enforced by
PostgreSQL, and no write or delete leaves a row pointing at a run that is gone (docs/scaling.md, "Foreign keys").

The races are forced as in test_retention_races: the test's transaction holds a member's row lock, the prune
starts on a thread and blocks on it after its snapshot was taken, and then the test writes what a retry, a
worker or a user would, and commits. With the constraints, such a prune failed at its commit; without them and
without its check of what changed since its snapshot, it left those rows behind.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from django_procedures import clock
from django_procedures.models import KeyRequest, Lease, ProcedureRun, Step
from django_procedures.store import retention
from testproject.testapp.procedures import Leaf
from tests.store.test_final_races import InThread, wait_blocked
from tests.store.test_retention_races import cutoff, old

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

_REFERENCES = [  # (table, column) of every key to a run
    (Step, "procedure_id"), (Lease, "procedure_id"), (KeyRequest, "procedure_id"), (KeyRequest, "root_id"),
    (ProcedureRun, "parent_id"), (ProcedureRun, "root_id"),
]


def orphans() -> dict[str, int]:
    """Rows whose key names a run that does not exist, by ``table.column`` (only those with any)."""
    found = {}
    run = ProcedureRun._meta.db_table
    with connection.cursor() as cursor:
        for model, column in _REFERENCES:
            table = model._meta.db_table
            cursor.execute(f"SELECT count(*) FROM {table} AS x WHERE x.{column} IS NOT NULL "
                           f"AND NOT EXISTS (SELECT FROM {run} AS r WHERE r.id = x.{column})")
            n = cursor.fetchone()[0]
            if n:
                found[f"{table}.{column}"] = n
    return found


def key_request(run: ProcedureRun, name: str = "k") -> KeyRequest:
    return KeyRequest._writer.create(name=name, procedure=run, root_id=run.root_id or run.id, mode="exclusive",
                                     granted=True, requested_at=clock.now())


def test_postgresql_enforces_no_foreign_key_to_a_run_and_the_indexes_stay():
    tables = {model._meta.db_table for model, _ in _REFERENCES}
    with connection.cursor() as cursor:
        cursor.execute("SELECT conrelid::regclass::text, conname FROM pg_constraint WHERE contype = 'f' "
                       "AND confrelid = %s::regclass", [ProcedureRun._meta.db_table])
        assert cursor.fetchall() == []
        # Each key is still the first column of an index (lookups by run, and the collector's cascades).
        cursor.execute("SELECT t.relname, a.attname FROM pg_index AS i JOIN pg_class AS t ON t.oid = i.indrelid "
                       "JOIN pg_attribute AS a ON a.attrelid = t.oid AND a.attnum = i.indkey[0] "
                       "WHERE t.relname = ANY(%s)", [sorted(tables)])
        indexed = set(cursor.fetchall())
    for model, column in _REFERENCES:
        assert (model._meta.db_table, column) in indexed, column


def old_tree_of_three() -> ProcedureRun:
    """An old finished root with a child and a grandchild, each with a step, a lease and a lock key row."""
    root = old()
    child = old(parent=root)
    for run in (root, child, old(parent=child)):
        key_request(run)
    return root


def test_a_prune_leaves_no_row_behind():
    old_tree_of_three()
    kept = old()
    kept_child = old("running", parent=kept)  # an unfinished tree stays whole
    key_request(kept_child)
    batch = retention.prune_batch(cutoff(), batch_size=10)
    assert (batch.trees, batch.procedures, batch.steps, batch.leases) == (1, 3, 3, 3)
    assert set(ProcedureRun.objects.values_list("id", flat=True)) == {kept.id, kept_child.id}
    assert KeyRequest.objects.count() == 1
    assert orphans() == {}


def test_deleting_a_run_through_the_orm_cascades_in_python_and_leaves_no_row_behind():
    root = old_tree_of_three()
    other = old()
    _, by_model = ProcedureRun._writer.filter(id=root.id).delete()
    assert by_model["django_procedures.ProcedureRun"] == 3
    assert by_model["django_procedures.Step"] == by_model["django_procedures.Lease"] == 3
    assert by_model["django_procedures.KeyRequest"] == 3
    assert list(ProcedureRun.objects.values_list("id", flat=True)) == [other.id]
    assert orphans() == {}


def test_a_member_retried_and_run_to_its_end_while_the_prune_waits_keeps_its_tree_and_its_new_rows():
    root = old("failed")
    child = old("failed", parent=root)
    other = old()  # a tree nobody touches: pruned in the same batch
    with transaction.atomic():
        ProcedureRun._writer.select_for_update().get(id=child.id)
        pruning = InThread(lambda: retention.prune_batch(cutoff(), batch_size=10))
        wait_blocked(1, "the prune to wait for the child's row")
        # A retry, a claim and a run to the end, committed together here: new rows, the child final again.
        at = clock.now()
        ProcedureRun._writer.filter(id=child.id).update(status="done", lease_token=2, finished_at=at)
        Lease._writer.create(procedure=child, token=2, worker="w", claimed_at=at, released_at=at,
                             outcome="completed")
        Step._writer.create(procedure=child, index=1, name="b", attempt=1, status="done", started_at=at,
                            finished_at=at)
    batch = pruning.join()  # with the constraints: IntegrityError at its commit
    assert (batch.trees, batch.procedures) == (1, 1)
    assert not ProcedureRun.objects.filter(id=other.id).exists()
    assert set(ProcedureRun.objects.values_list("id", flat=True)) == {root.id, child.id}
    assert orphans() == {}
    assert retention.prune_batch(cutoff(), batch_size=10).procedures == 2  # the next batch takes it whole
    assert orphans() == {} and not Step.objects.exists() and not Lease.objects.exists()


def test_a_child_submitted_under_a_finished_member_while_the_prune_waits_is_refused_and_the_tree_goes_whole():
    root = old()
    child = old(parent=root)
    with pytest.raises(ValueError, match=f"parent procedure {child.id} is done: children can only be added"):
        with transaction.atomic():
            ProcedureRun._writer.select_for_update().get(id=child.id)
            pruning = InThread(lambda: retention.prune_batch(cutoff(), batch_size=10))
            wait_blocked(1, "the prune to wait for the child's row")
            Leaf.submit({"n": 1}, parent=child.id)  # a finished member takes no new child
    assert pruning.join().procedures == 2
    assert not ProcedureRun.objects.exists() and orphans() == {}


def test_a_child_submitted_under_a_parent_a_prune_deletes_is_refused():
    root = old()
    with transaction.atomic():
        assert retention.prune_batch(cutoff(), batch_size=10).trees == 1
        # A pruned tree is finished: the submit refuses its parent without waiting for the prune's row lock.
        with pytest.raises(ValueError, match=f"parent procedure {root.id} is done"):
            InThread(lambda: Leaf.submit({"n": 1}, parent=root.id)).join()
    with pytest.raises(ValueError, match="does not exist"):
        Leaf.submit({"n": 1}, parent=root.id)
    assert not ProcedureRun.objects.exists() and orphans() == {}
