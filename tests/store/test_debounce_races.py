"""Debounced submits racing each other and the claim, on two PostgreSQL connections: no submit is ever lost."""

import pytest
from django.db import transaction

from django_procedures.models import ProcedureRun
from django_procedures.store.claim import claim
from tests.store.test_debounce import Reindex
from tests.store.test_final_races import InThread, wait_blocked

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
KEY = "user:1"


def submit(v):
    return Reindex.submit({"v": v}, key=KEY, debounce=0)


def runs():
    return list(ProcedureRun.objects.filter(type_name=Reindex.type_name).order_by("created_at", "id")
                .values_list("id", "status", "key", "state"))


def test_two_submits_of_a_new_key_end_with_one_pending_procedure_holding_the_later_state():
    with transaction.atomic():
        first = submit(1)  # inserted, not committed
        second = InThread(lambda: submit(2))
        wait_blocked(1, "the second submit's insert to wait for the first's")
    second = second.join()
    assert second.id == first.id and first.created and not second.created
    assert runs() == [(first.id, "ready", KEY, {"v": 2})]


def test_a_submit_meeting_another_on_a_pending_procedure_waits_and_replaces_its_state():
    pending = submit(0)
    with transaction.atomic():
        submit(1)  # holds the row
        second = InThread(lambda: submit(2))
        wait_blocked(1, "the second submit to wait for the row")
    assert second.join().id == pending.id
    assert runs() == [(pending.id, "ready", KEY, {"v": 2})]


def test_a_submit_meeting_a_claim_makes_a_new_procedure():
    pending = submit(1)
    with transaction.atomic():
        (claimed,) = claim("w", type_names=[Reindex.type_name], lease_seconds=60)  # its row lock held until commit
        late = InThread(lambda: submit(2))
        wait_blocked(1, "the submit to wait for the claimed row")
    late = late.join()
    assert claimed.id == pending.id and claimed.state == {"v": 1} and late.created
    assert runs() == [(pending.id, "running", None, {"v": 1}), (late.id, "ready", KEY, {"v": 2})]


def test_a_claim_meeting_a_submit_skips_the_row_and_claims_the_new_state_after():
    pending = submit(1)
    with transaction.atomic():
        submit(2)  # holds the row
        assert InThread(lambda: claim("w", type_names=[Reindex.type_name], lease_seconds=60)).join() == []
    (claimed,) = claim("w", type_names=[Reindex.type_name], lease_seconds=60)
    assert (claimed.id, claimed.state) == (pending.id, {"v": 2})
