"""A claim deciding a child's lent key never waits on the tree's root row (found by the soak: a deadlock).

A child's final transaction locks its ancestors' rows, then waits for the
advisory lock of each key it releases. A claim deciding a sibling's keys
holds that advisory lock and inserts ``KeyRequest`` rows whose foreign key to
the root is checked at COMMIT, which takes a share lock on the root row:
without care, the two wait for each other and PostgreSQL kills one.
"""

import threading
import time

import pytest
from django.db import connection, transaction

from django_procedures.models import KeyRequest, ProcedureRun
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store import locks, operations, tree
from django_procedures.store.claim import claim
from testproject.testapp.procedures import KeyHolder, Leaf, Parent

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
TYPES = [Parent.type_name, Leaf.type_name]
X = [["tenant:1", "exclusive"]]


def take(limit=1):
    return claim("w", type_names=TYPES, limit=limit, lease_seconds=30)


def test_a_sibling_finishing_while_a_claim_decides_the_lent_key_does_not_deadlock():
    parent = Parent.submit({"fanout": 2, "keys": X, "child_keys": X})
    (p,) = take()
    execute(RunningClaim(p))  # spawns two leaves that take the key the parent lends them
    (first,) = take()
    second = ProcedureRun.objects.get(parent_id=parent.id, keys_held=False)

    locked, go, errors = threading.Event(), threading.Event(), []

    def first_leaf_finishes():
        # What the first leaf's final transaction does: lock the parent, then release its keys.
        try:
            with transaction.atomic():
                tree.lock_rows([parent.id])
                locked.set()
                go.wait(120)
                locks.release([first.id])
        except Exception as error:  # pragma: no cover - the regression
            errors.append(error)
        finally:
            connection.close()

    finisher = threading.Thread(target=first_leaf_finishes)
    finisher.start()
    assert locked.wait(120)
    # A claim that waited for the root row would wait for the finisher, which waits for this thread: the lock
    # timeout turns that into an error (a claim never waits for a row lock, however slow the machine).
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '20s'")
    try:
        claimed = take()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
        go.set()
        finisher.join(120)
    assert errors == []
    assert claimed == []  # the second leaf was passed by while its root is locked: decided by a later claim
    assert not KeyRequest.objects.filter(procedure_id=second.id).exists()

    (later,) = take()
    assert later.id == second.id  # the first leaf's key went back to the tree, so the second one gets it


def test_a_waiter_cancelled_while_a_holder_releases_the_key_does_not_deadlock():
    # Found in the soak's PostgreSQL log: a holder's final transaction takes the key's advisory lock and then
    # wakes the key's waiters; a cancel (or a deadlock's victim) locks its waiting row, then waits for that
    # advisory lock to release the waiter's request. Waking the waiter waited for its row: a deadlock.
    holder = KeyHolder.submit({"keys": X, "hold": 0})
    waiter = KeyHolder.submit({"keys": X})
    (h,) = claim("w", type_names=[KeyHolder.type_name], lease_seconds=30)
    assert h.id == holder.id
    assert claim("w", type_names=[KeyHolder.type_name], lease_seconds=30) == []  # the waiter waits for X

    keys_locked, go, errors = threading.Event(), threading.Event(), []

    def pause_after_key_lock(execute_sql, sql, params, many, context):
        result = execute_sql(sql, params, many, context)
        if "pg_advisory_xact_lock(" in sql and not keys_locked.is_set():
            keys_locked.set()
            go.wait(60)
        return result

    def holder_releases():  # what the holder's final transaction does with its keys
        try:
            with transaction.atomic(), connection.execute_wrapper(pause_after_key_lock):
                locks.release([h.id])
        except Exception as error:  # pragma: no cover - the regression
            errors.append(error)
        finally:
            connection.close()

    def waiter_cancelled():
        try:
            operations.cancel(waiter.id)
        except Exception as error:  # pragma: no cover - the regression
            errors.append(error)
        finally:
            connection.close()

    releaser, canceller = threading.Thread(target=holder_releases), threading.Thread(target=waiter_cancelled)
    releaser.start()
    try:
        assert keys_locked.wait(60)
        canceller.start()
        deadline = time.monotonic() + 60
        with connection.cursor() as cursor:  # the cancel has locked the waiter's row and waits for the key
            while time.monotonic() < deadline:
                cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                if cursor.fetchone()[0]:
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the cancel never waited for the key's lock")
    finally:
        go.set()
        releaser.join(60)
        if canceller.ident is not None:
            canceller.join(60)
    assert errors == []
    assert ProcedureRun.objects.get(id=waiter.id).status == "cancelled"
    assert not KeyRequest.objects.exists()
