"""Flow-control limits in one process: slots taken in the claim and given back by every way a lease ends."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from django_procedures.models import Lease, LimitSlot, LimitUse, ProcedureRun
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store import limits as flow
from django_procedures.store.claim import claim
from django_procedures.store.due import due_times
from django_procedures.store.leases import sweep_expired
from django_procedures.testing import drain
from testproject.testapp.procedures import Limited, ThreeSteps

pytestmark = pytest.mark.django_db
TYPES = [Limited.type_name, ThreeSteps.type_name]


def take(limit=1, queues=None):
    return claim("w", type_names=TYPES, limit=limit, lease_seconds=30, queues=queues)


def in_use(name):
    return LimitSlot.objects.in_use(name)


def test_a_concurrency_limit_admits_max_and_the_rest_stay_ready_and_unfailed():
    handles = [Limited.submit({"concurrency": [["crm", 2]]}) for _ in range(4)]
    held = take(limit=4)
    assert [c.id for c in held] == [h.id for h in handles[:2]]
    assert take(limit=4) == []
    assert in_use("crm") == 2
    rest = ProcedureRun.objects.filter(id__in=[h.id for h in handles[2:]])
    assert {(r.status, r.failures, r.attempt) for r in rest} == {("ready", 0, 1)}
    assert Lease.objects.get(procedure_id=held[0].id).limits == ["crm"]


def test_finishing_gives_the_slot_back_in_its_transaction_and_the_next_is_claimed():
    first, second = (Limited.submit({"concurrency": [["crm", 1]]}) for _ in range(2))
    (held,) = take()
    assert take() == []
    execute(RunningClaim(held))
    assert first.refresh().status == "done"
    assert in_use("crm") == 0
    assert [c.id for c in take()] == [second.id]


@pytest.mark.parametrize("then", ["fail", "retry", "sleep", "wait"])
def test_every_way_the_attempt_ends_gives_the_slot_back(then):
    Limited.submit({"concurrency": [["crm", 1]], "then": then})
    (held,) = take()
    assert in_use("crm") == 1
    execute(RunningClaim(held))
    assert in_use("crm") == 0


def test_a_lease_given_back_gives_its_slot_back():
    from django_procedures.store.transitions import give_back

    Limited.submit({"concurrency": [["crm", 1]]})
    (held,) = take()
    give_back(held)
    assert in_use("crm") == 0
    assert len(take()) == 1


def test_the_sweep_of_an_expired_lease_gives_its_slot_back():
    Limited.submit({"concurrency": [["crm", 1]]})
    assert len(claim("gone", type_names=TYPES, limit=1, lease_seconds=0.01)) == 1
    import time

    time.sleep(0.05)
    assert sweep_expired().resumed == 1
    assert in_use("crm") == 0
    assert len(take()) == 1


def test_a_cancel_gives_the_slot_back():
    handle = Limited.submit({"concurrency": [["crm", 1]]})
    take()
    handle.cancel()
    assert in_use("crm") == 0


def test_limited_work_never_holds_up_unlimited_work_behind_it():
    for _ in range(50):
        Limited.submit({"concurrency": [["crm", 1]]})
    take()  # crm is full now: 49 limited rows wait at the front of the queue
    later = ThreeSteps.submit()
    assert [c.id for c in take(limit=5)] == [later.id]


def test_names_carry_state_each_customer_its_own_slots():
    handles = [Limited.submit({"customer": c, "concurrency": [["customer:{customer}", 1]]})
               for c in ("a", "a", "b", "c")]
    held = {c.id for c in take(limit=10)}
    assert held == {handles[0].id, handles[2].id, handles[3].id}


def test_rows_of_a_full_limit_never_use_up_a_claim_of_other_names():
    for _ in range(flow.SCAN * 2):
        Limited.submit({"customer": "a", "concurrency": [["customer:{customer}", 1]]})
    b = Limited.submit({"customer": "b", "concurrency": [["customer:{customer}", 1]]})
    take()  # customer a's slot
    assert [c.id for c in take()] == [b.id]  # past 128 rows of customer a


def test_rate_limit_admits_count_per_window_and_says_when_next():
    for _ in range(5):
        Limited.submit({"rate": [["api", 3, 60]]})
    start = timezone.now()
    report = drain(now=start)
    assert report.claimed == 3
    assert report.next_due is not None
    assert start + timedelta(seconds=59) < report.next_due <= start + timedelta(seconds=61)
    assert drain(now=start + timedelta(seconds=30)).claimed == 0
    assert drain(now=start + timedelta(seconds=61)).claimed == 2


def test_drain_runs_limited_work_one_slot_at_a_time():
    for _ in range(3):
        Limited.submit({"concurrency": [["crm", 1]]})
    assert drain().claimed == 3
    assert in_use("crm") == 0


@override_settings(PROCEDURES={"QUEUES": {"email": {"concurrency": 1}}})
def test_queue_limits_come_from_settings():
    first = ThreeSteps.submit(queue="email")
    ThreeSteps.submit(queue="email")
    other = ThreeSteps.submit(queue="default")
    held = take(limit=5)
    assert {c.id for c in held} == {first.id, other.id}
    assert in_use("queue:email") == 1
    assert due_times(type_names=TYPES).run_at is None  # the queued one is over its limit: not due for anyone


def test_a_due_row_over_its_limit_is_not_due_so_idle_workers_do_not_spin():
    Limited.submit({"concurrency": [["crm", 1]]})
    Limited.submit({"concurrency": [["crm", 1]]})
    take()
    assert due_times(type_names=TYPES).run_at is None


def test_limits_are_checked_at_submit():
    with pytest.raises(TypeError, match=r"limits\(\) must return"):
        Limited.submit({"bad_limits": ["nope"]})
    with pytest.raises(TypeError, match=r"limits\(\) must return a list"):
        Limited.submit({"bad_limits": "nope"})
    assert not ProcedureRun.objects.exists()


def test_unused_names_cost_nothing_once_tidied():
    for c in range(20):
        Limited.submit({"customer": c, "concurrency": [["customer:{customer}", 1]]})
    assert drain().claimed == 20
    assert LimitUse.objects.count() == 20
    flow.tidy(timezone.now())
    assert LimitUse.objects.count() == 0


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the claim's statements on PostgreSQL")
def test_a_claim_without_limits_runs_the_statements_it_always_did(django_assert_num_queries):
    ThreeSteps.submit()
    with django_assert_num_queries(2) as queries:  # the keyed pass and the fast path, as before limits
        assert len(claim("w", type_names=[ThreeSteps.type_name], limit=1, lease_seconds=30)) == 1
    assert "procedures_limit" not in " ".join(q["sql"] for q in queries.captured_queries)


def test_limits_follow_the_state_each_checkpoint_saves():
    handle = Limited.submit({"customer": "a", "next_customer": "b", "concurrency": [["customer:{customer}", 1]],
                             "then": "sleep"})
    (held,) = take()
    assert held.limits == ["customer:a"]
    execute(RunningClaim(held))  # work ran and slept: the row now carries the new state's limits
    row = ProcedureRun.objects.get(id=handle.id)
    assert (row.status, row.limits) == ("waiting", [["customer:b", "concurrency", 1, 0.0]])
    assert in_use("customer:a") == 0


def test_limits_raising_after_a_step_fails_that_attempt_with_the_error_and_blocks_nothing():
    broken = Limited.submit({"concurrency": [["crm", 1]], "break_limits": True})
    other = Limited.submit({"concurrency": [["crm", 1]]})
    drain()
    row = ProcedureRun.objects.get(id=broken.id)
    assert row.status == "failed" and "limits broke" in row.error
    assert row.attempt > 1  # retried: the error is retryable
    assert other.refresh().status == "done"
    assert in_use("crm") == 0


def test_a_schedules_runs_carry_the_limits_of_its_state():
    from datetime import UTC, datetime

    from django_procedures import clock, register_schedule, tick

    t0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    with clock.frozen_at(t0):
        register_schedule("limited", Limited, period=timedelta(minutes=1),
                          state={"customer": "a", "concurrency": [["customer:{customer}", 1]]})
    tick(t0)
    (row,) = ProcedureRun.objects.filter(schedule__isnull=False)
    assert row.limits == [["customer:a", "concurrency", 1, 0.0]]


def test_the_queue_waiting_for_a_full_limit_is_noted_by_idle_workers_and_woken_when_a_slot_frees():
    Limited.submit({"concurrency": [["crm", 1]]}, queue="crm-work")
    Limited.submit({"concurrency": [["crm", 1]]}, queue="crm-later")
    (held,) = take(queues=["crm-work", "crm-later"])
    assert due_times(type_names=TYPES, queues=["crm-later"]).run_at is None  # idle: over its limit
    assert LimitUse.objects.get(name="crm").waiting == ["crm-later"]  # its NOTIFY goes there when a slot frees
    execute(RunningClaim(held))
    assert LimitUse.objects.get(name="crm").waiting == []


def test_a_note_of_the_freeing_workers_own_queue_is_kept_for_a_lease_given_back():
    from django_procedures.store.transitions import give_back

    for _ in range(3):
        Limited.submit({"concurrency": [["crm", 1]]}, queue="crm-work")
    (held,) = take(queues=["crm-work"])
    due_times(type_names=TYPES, queues=["crm-work"])
    assert LimitUse.objects.get(name="crm").waiting == ["crm-work"]
    execute(RunningClaim(held))  # its worker claims again at once: nobody else is woken for the slot
    assert LimitUse.objects.get(name="crm").waiting == ["crm-work"]
    (held,) = take(queues=["crm-work"])
    give_back(held)  # a worker stopping: the queue is woken
    assert LimitUse.objects.get(name="crm").waiting == []


def test_an_async_limits_method_is_refused_when_the_class_is_defined():
    from django_procedures import Procedure, step

    with pytest.raises(Exception, match="limits"):
        class AsyncLimits(Procedure):
            type_name = "tests.AsyncLimits"

            async def limits(self):
                return []

            @step
            def only(self, ctx):
                pass


def test_the_limit_table_is_the_one_the_docs_name():
    assert LimitUse._meta.db_table == "django_procedures_limituse"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="LISTEN/NOTIFY")
@pytest.mark.django_db(transaction=True)
def test_the_transaction_that_frees_a_slot_notifies_the_waiting_queue():
    import psycopg

    from django_procedures.store.listening import listen_params
    from django_procedures.store.notify import CHANNEL

    Limited.submit({"concurrency": [["crm", 1]]}, queue="crm-work")
    Limited.submit({"concurrency": [["crm", 1]]}, queue="crm-later")
    (held,) = take(queues=["crm-work"])
    due_times(type_names=TYPES, queues=["crm-later"])  # an idle worker of crm-later notes that it waits
    with psycopg.connect(**listen_params(), autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        execute(RunningClaim(held))  # commits the completion, which frees the slot
        payloads = {n.payload for n in listener.notifies(timeout=10, stop_after=1)}
    assert payloads == {"crm-later"}


def test_stored_limits_that_no_longer_parse_never_stop_the_claims():
    handle = Limited.submit({"concurrency": [["crm", 1]]})
    ProcedureRun._writer.filter(id=handle.id).update(limits=[["crm", "concurrency", 0, 0.0]])
    assert [c.id for c in take()] == [handle.id]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL plans")
def test_the_fast_path_and_the_limited_pass_each_can_read_their_own_partial_index():
    from django_procedures.store import claim as claims
    from django_procedures.store import limit_sql
    from django_procedures.store.db import text_array
    from django_procedures.store.kinds import Kinds

    kinds = Kinds.of(TYPES)
    fast = claims._PG_DUE.format(run=ProcedureRun._meta.db_table, queue_filter="")
    limited = limit_sql.candidates(limit_sql.OWN, False)
    params = {"now": timezone.now(), **kinds.params(), "limit": 5, "skip": [], "queue_limits": "{}", "wanted": 1,
              "taken": [],
              "limited_queues": text_array(())}
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        plans = []
        for sql in (fast, limited):
            cursor.execute("EXPLAIN " + sql, params)
            plans.append("\n".join(row[0] for row in cursor.fetchall()))
    # On the test's near-empty table the planner may prefer the due index for the fast path (costs tie); both
    # are index reads, never a scan of the table. benchmarks/claim_plan.py checks the plans on realistic tables.
    assert "procedures_claim_idx" in plans[0] or "procedures_due_idx" in plans[0], plans[0]
    assert "Seq Scan" not in plans[0], plans[0]
    assert "procedures_limited_claim_idx" in plans[1], plans[1]


def test_a_claim_of_many_rounds_never_hands_one_slot_to_two_procedures():
    for _ in range(10):
        Limited.submit({"concurrency": [["crm", 2]]})
    held = take(limit=3)  # two rounds of candidates: the slots of the first are still free in the database
    assert len(held) == 2
    assert LimitSlot.objects.held().filter(name="crm").count() == 2
    assert take(limit=3) == []


def test_slots_are_made_below_the_limit_only_and_reused():
    for _ in range(5):
        Limited.submit({"concurrency": [["crm", 3]]})
    held = take(limit=5)
    assert len(held) == 3
    assert sorted(LimitSlot.objects.filter(name="crm").values_list("slot", flat=True)) == [0, 1, 2]
    execute(RunningClaim(held[0]))
    assert len(take(limit=5)) == 1
    assert LimitSlot.objects.filter(name="crm").count() == 3


def test_a_free_limited_row_is_due_now_so_burst_workers_and_drain_keep_going():
    Limited.submit({"concurrency": [["crm", 2]]})
    Limited.submit({"concurrency": [["crm", 2]]})
    take()
    assert due_times(type_names=TYPES).limited_ready  # one slot is free: a burst worker stays, drain looks again
    take()
    times = due_times(type_names=TYPES)
    assert (times.run_at, times.limited_ready) == (None, False)  # full: a slot freeing wakes the idle


def test_the_sweep_keeps_the_slots_of_names_held_and_deletes_idle_ones():
    Limited.submit({"concurrency": [["held", 1]]})
    Limited.submit({"concurrency": [["idle", 1]]})
    first, second = take(limit=2)
    execute(RunningClaim(second if second.limits == ["idle"] else first))
    flow.tidy(timezone.now())
    assert set(LimitSlot.objects.values_list("name", flat=True)) == {"held"}
    assert set(LimitUse.objects.values_list("name", flat=True)) == {"held"}


def test_a_rate_slot_is_free_again_per_after_the_claim_that_took_it():
    for _ in range(4):
        Limited.submit({"rate": [["api", 2, 10]]})
    start = timezone.now()
    assert drain(now=start).claimed == 2
    assert sorted(LimitSlot.objects.filter(name="api", rate=True).values_list("free_at", flat=True)) == [
        start + timedelta(seconds=10)] * 2
    assert drain(now=start + timedelta(seconds=9.9)).claimed == 0
    assert drain(now=start + timedelta(seconds=10)).claimed == 2


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks of another connection")
@pytest.mark.django_db(transaction=True)
def test_a_slot_another_transaction_has_locked_is_passed_by_without_waiting():
    import psycopg

    from django_procedures.store.listening import listen_params

    for _ in range(3):
        Limited.submit({"concurrency": [["crm", 2]]})
    execute(RunningClaim(take(limit=2)[0]))  # both slots made, one free again
    with psycopg.connect(**listen_params()) as other:  # a claim taking the last free slot right now
        other.execute("SET lock_timeout = '5s'")
        locked = other.execute(f"SELECT slot FROM {LimitSlot._meta.db_table} WHERE holder_id IS NULL "
                               "FOR UPDATE").fetchall()
        assert len(locked) == 1
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '1s'")  # a wait would fail the claim
        assert take() == []
        other.rollback()
    assert len(take()) == 1


def test_the_sweep_says_how_many_names_it_deleted():
    for c in range(3):
        Limited.submit({"customer": c, "concurrency": [["customer:{customer}", 1]]})
    drain()
    assert flow.tidy(timezone.now()) == 3
    assert flow.tidy(timezone.now()) == 0
