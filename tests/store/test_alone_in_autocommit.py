"""A checkpoint or completion that is the whole of its transaction runs in autocommit with no ``atomic()`` at all
(``final.joined(alone=True)``): it still commits whole or not at all, a fenced-out one writes nothing, and the
signals it sends after commit see it committed."""

import pytest
from django.db import transaction

from django_procedures import signals
from django_procedures.exceptions import LeaseLost
from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.store import transitions
from tests.store.advancing import claimed, records, steal

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def atomics(monkeypatch):
    """How many ``atomic()`` blocks were entered."""
    entered = []
    enter = transaction.Atomic.__enter__

    def spy(self):
        entered.append(self)
        return enter(self)

    monkeypatch.setattr(transaction.Atomic, "__enter__", spy)
    return entered


def test_a_checkpoint_and_a_completion_alone_open_no_atomic_block_and_commit(atomics):
    c = claimed()
    atomics.clear()  # (the submit's and the claim's)
    seen = []

    def on_done(sender, procedure_id, **kwargs):  # sent after commit: the row is done for everyone
        seen.append(ProcedureRun.objects.get(id=procedure_id).status)

    signals.procedure_done.connect(on_done)
    try:
        transitions.commit_checkpoint(c, records(c, "fetch"), {"n": 1}, "transform", ends_transaction=True)
        transitions.complete(c, records(c, "transform", "load"), {"n": 3}, "out", ends_transaction=True)
    finally:
        signals.procedure_done.disconnect(on_done)
    assert atomics == []
    assert seen == ["done"]
    row = ProcedureRun.objects.get(id=c.id)
    assert (row.status, row.step, row.output) == ("done", 3, "out")
    assert Step.objects.filter(procedure_id=c.id).count() == 3
    assert Lease.objects.get(procedure_id=c.id).outcome == "completed"


def test_a_fenced_out_completion_alone_writes_nothing_and_sends_nothing(atomics):
    c = claimed()
    atomics.clear()  # (the submit's and the claim's)
    seen = []

    def on_done(sender, **kwargs):
        seen.append(kwargs["procedure_id"])

    steal(c)
    signals.procedure_done.connect(on_done)
    try:
        with pytest.raises(LeaseLost):
            transitions.complete(c, records(c, "fetch", "transform", "load"), {"n": 3}, "out",
                                 ends_transaction=True)
        with pytest.raises(LeaseLost):
            transitions.commit_checkpoint(c, records(c, "fetch"), {"n": 1}, "transform", ends_transaction=True)
    finally:
        signals.procedure_done.disconnect(on_done)
    assert atomics == [] and seen == []
    row = ProcedureRun.objects.get(id=c.id)
    assert (row.status, row.step, row.output) == ("running", 0, None)
    assert not Step.objects.filter(procedure_id=c.id).exists()
    assert Lease.objects.get(procedure_id=c.id).released_at is None


def test_without_ends_transaction_the_completion_keeps_its_transaction(atomics):
    """A caller that may write after it (``ends_transaction`` False) still gets the one transaction."""
    c = claimed()
    atomics.clear()  # (the submit's and the claim's)
    transitions.complete(c, records(c, "fetch", "transform", "load"), {"n": 3}, "out")
    assert len(atomics) == 1
    assert ProcedureRun.objects.get(id=c.id).status == "done"
