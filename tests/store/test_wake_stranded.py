"""The sweep's safety net for key waiters reads the key queues once, however many procedures wait.

Found by the soak: with a few hundred procedures waiting for busy keys, the
per-waiter queries of every sweep on every worker took longer than the sweep
interval and starved the claim loop.
"""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_procedures.models import ProcedureRun
from django_procedures.store import locks
from django_procedures.store.claim import claim
from testproject.testapp.procedures import KeyHolder

pytestmark = pytest.mark.django_db


def take(limit):
    return claim("w", type_names=[KeyHolder.type_name], limit=limit, lease_seconds=30)


def test_wake_stranded_wakes_exactly_the_waiters_whose_keys_are_free_in_constant_queries():
    holders = [KeyHolder.submit({"keys": [[f"k{i}", "exclusive"]]}) for i in range(5)]
    waiters = [KeyHolder.submit({"keys": [[f"k{i % 5}", "exclusive"]]}) for i in range(40)]
    assert sorted(c.id for c in take(100)) == sorted(h.id for h in holders)
    assert ProcedureRun.objects.filter(waiting_for_keys=True).count() == 40

    with CaptureQueriesContext(connection) as queries:
        assert locks.wake_stranded() == 0  # every key is held: nobody is woken
    assert len(queries) <= 2, [q["sql"] for q in queries]

    # A waiter whose key nobody holds any more (its wake-up was missed) is woken; the others stay.
    ProcedureRun._writer.filter(id=holders[0].id).update(status="done")
    locks.KeyRequest._writer.filter(procedure_id=holders[0].id).delete()
    with CaptureQueriesContext(connection) as queries:
        woken = locks.wake_stranded()
    assert len(queries) <= 5, [q["sql"] for q in queries]  # + the update and the NOTIFY
    assert woken == 1  # of the eight waiting for k0 only the oldest may have it; the others wait behind it
    assert not ProcedureRun.objects.get(id=waiters[0].id).waiting_for_keys
    assert ProcedureRun.objects.filter(waiting_for_keys=True).count() == 39
    assert [c.id for c in take(100)] == [waiters[0].id]
