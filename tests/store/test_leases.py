"""Claims, renewals and the recovery sweep against the database."""

from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.store.claim import claim
from django_procedures.store.leases import renew, sweep_expired
from django_procedures.testing import drain
from testproject.testapp.procedures import ChargeCard, ThreeSteps

TYPES = [ThreeSteps.type_name, ChargeCard.type_name]


@pytest.mark.django_db
def test_claim_takes_a_batch_under_one_lease_each():
    ThreeSteps.submit_many([{}] * 5)
    claims = claim("w1", type_names=TYPES, limit=3, lease_seconds=30)
    assert len(claims) == 3
    assert {c.lease_token for c in claims} == {1}
    rows = ProcedureRun.objects.filter(status="running")
    assert rows.count() == 3 and set(rows.values_list("lease_owner", flat=True)) == {"w1"}
    expires = rows.first().lease_expires_at
    assert timedelta(seconds=25) < expires - timezone.now() < timedelta(seconds=35)
    assert Lease.objects.filter(worker="w1", released_at__isnull=True).count() == 3
    assert len(claim("w2", type_names=TYPES, limit=10, lease_seconds=30)) == 2


@pytest.mark.django_db
def test_claim_filters_queues():
    ThreeSteps.submit(queue="mail")
    ThreeSteps.submit(queue="billing")
    assert [c.queue for c in claim("w", type_names=TYPES, queues=["billing"], limit=5, lease_seconds=30)] == [
        "billing"]


@pytest.mark.django_db
def test_renew_extends_only_leases_still_held():
    ThreeSteps.submit_many([{}] * 2)
    a, b = claim("w", type_names=TYPES, limit=2, lease_seconds=5)
    ProcedureRun._writer.filter(id=b.id).update(lease_token=b.lease_token + 1)  # taken over
    held = renew([(a.id, a.lease_token), (b.id, b.lease_token)], lease_seconds=60)
    assert held == {(a.id, a.lease_token)}
    expires = ProcedureRun.objects.get(id=a.id).lease_expires_at
    assert expires - timezone.now() > timedelta(seconds=50)


@pytest.mark.django_db
def test_sweep_returns_expired_leases_and_records_the_lost_attempt():
    handle = ThreeSteps.submit()
    (c,) = claim("dead-worker", type_names=TYPES, limit=1, lease_seconds=30)
    ProcedureRun._writer.filter(id=c.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert sweep_expired().resumed == 1
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.status, run.lease_token, run.attempt, run.lost, run.lease_owner) == ("ready", 2, 2, 1, "")
    lost = Step.objects.get(procedure_id=handle.id)
    assert (lost.status, lost.name, lost.attempt) == ("lost", "one", 1)
    assert "worker dead-worker lost" in lost.error
    assert Lease.objects.get(procedure_id=handle.id).outcome == "expired"
    drain()
    assert handle.refresh().status == "done"
    assert list(Step.objects.filter(procedure_id=handle.id, name="one").values_list("attempt", "status")) == [
        (1, "lost"), (2, "done")]


@pytest.mark.django_db
def test_sweep_parks_a_procedure_lost_inside_a_non_idempotent_step():
    handle = ChargeCard.submit()
    (c,) = claim("dead-worker", type_names=TYPES, limit=1, lease_seconds=30)
    ProcedureRun._writer.filter(id=c.id).update(in_unsafe_step=True,
                                                lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert sweep_expired().parked == 1
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed" and run.error == "interrupted during non-idempotent step charge"
    assert run.failure_can_retry
    handle.retry(by="ops")
    drain()
    assert handle.refresh().status == "done"


@pytest.mark.django_db
def test_sweep_leaves_live_leases_alone():
    ThreeSteps.submit()
    claim("w", type_names=TYPES, limit=1, lease_seconds=30)
    assert sweep_expired().resumed == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_claim_skips_rows_locked_by_another_transaction_without_waiting():
    first, second = ThreeSteps.submit_many([{}, {}])
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params) as other:
        other.execute("SET lock_timeout = '60s'")
        other.execute(f"SELECT id FROM {ProcedureRun._meta.db_table} WHERE id = %s FOR UPDATE", [first.id])
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '20s'")  # waiting would fail the test with an error
        try:
            claims = claim("w", type_names=TYPES, limit=2, lease_seconds=30)
        finally:
            with connection.cursor() as cursor:  # the connection outlives the test: later tests may wait
                cursor.execute("RESET lock_timeout")
        assert [c.id for c in claims] == [second.id]
        other.rollback()
    assert [c.id for c in claim("w", type_names=TYPES, limit=2, lease_seconds=30)] == [first.id]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_leases_use_the_database_clock_not_the_frozen_one():
    from datetime import UTC, datetime

    ThreeSteps.submit(run_after=datetime(2001, 1, 1, tzinfo=UTC))
    from django_procedures import clock

    with clock.frozen_at(datetime(2001, 1, 1, tzinfo=UTC)):
        (c,) = claim("w", type_names=TYPES, limit=1, lease_seconds=30)
    expires = ProcedureRun.objects.get(id=c.id).lease_expires_at
    assert expires > timezone.now()  # not 2001
