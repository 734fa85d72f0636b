"""Concurrent final transitions lose no update of the parent or the schedule's counters.

Each test forces one interleaving with row locks: the test's own transaction
holds a row another transaction needs, starts two transactions in threads (each
on its own connection), waits until both are blocked behind it, and lets go.
The lease sweep parks a run lost inside a non-idempotent step (a final
transition) while a sibling finishes, or while a "trigger now" decides on the
same schedule. Before the one final-transition path, the sweep read the parent's
count and the schedule's slots and pending ticks without locking them first, and
wrote back what it had read: the other transaction's update was lost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from django_procedures import register_schedule, tick
from django_procedures.models import Lease, ProcedureRun, Schedule
from django_procedures.policy.status import FINAL
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store import schedules
from django_procedures.store.claim import Claim, claim
from django_procedures.store.leases import sweep_expired
from django_procedures.store.transitions import enter_unsafe_step
from django_procedures.testing import drain
from testproject.testapp.procedures import ChargeCard, Leaf, TolerantParent
from tests.runtime.processes import wait_for
from tests.runtime.trees import blocked_by_this_transaction

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


class InThread:
    """Runs ``target`` on a thread with its own database connection; ``join`` returns its result or raises."""

    def __init__(self, target: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = target()
            except BaseException as error:  # pragma: no cover - reported by join
                self.error = error
            finally:
                connection.close()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self) -> Any:
        self.thread.join(60)
        assert not self.thread.is_alive(), "the transaction never finished"
        if self.error is not None:
            raise self.error
        return self.result


def claim_lost_in_unsafe_step(type_name: str) -> Claim:
    """Claim one procedure as a worker that dies inside a non-idempotent step: its lease runs out at once."""
    (lost,) = claim("dead-worker", type_names=[type_name], limit=1, lease_seconds=0.01)
    enter_unsafe_step(lost)

    def expired() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT lease_expires_at < clock_timestamp() FROM {ProcedureRun._meta.db_table} "
                           "WHERE id = %s", [lost.id])
            return cursor.fetchone()[0]

    wait_for(expired, timeout=60, what="the dead worker's lease to expire")
    return lost


def wait_blocked(count: int, what: str) -> None:
    wait_for(lambda: len(blocked_by_this_transaction()) >= count, timeout=60, what=what)


def test_a_sweep_parking_a_child_while_its_sibling_finishes_wakes_the_parent_without_waiting_for_it():
    parent = TolerantParent.submit({"fanout": 2})
    (p,) = claim("w", type_names=[TolerantParent.type_name], lease_seconds=60)
    execute(RunningClaim(p))  # spawns two leaves; the parent waits for both
    assert ProcedureRun.objects.get(id=parent.id).pending_children == 2
    lost = claim_lost_in_unsafe_step(Leaf.type_name)
    (sibling,) = claim("w", type_names=[Leaf.type_name], lease_seconds=60)

    with transaction.atomic():
        # The sibling's final transaction has written its row and blocks on its own lease row (held here).
        Lease.objects.select_for_update().get(procedure_id=sibling.id, token=sibling.lease_token)
        finishing = InThread(lambda: execute(RunningClaim(sibling)))
        wait_blocked(1, "the sibling's final transaction to block on its lease row")
        # A child ending done leaves its parent's row alone: the sweep's failure locks it without waiting.
        assert InThread(sweep_expired).join().parked == 1
        row = ProcedureRun.objects.get(id=parent.id)
        assert (row.status, row.pending_children) == ("ready", 1)  # woken by the failure; the sibling is still open
    assert finishing.join() == "completed"

    assert ProcedureRun.objects.get(id=lost.id).status == "failed"
    assert ProcedureRun.objects.get(id=sibling.id).status == "done"
    drain()
    row.refresh_from_db()
    assert (row.status, row.pending_children) == ("done", 0)
    assert row.state["failed_children"] == ["interrupted during non-idempotent step work"]
    assert row.state["seen"] == [["failed", None], ["done", 2]] or row.state["seen"] == [["done", 0], ["failed", None]]


def test_a_sweep_parking_a_scheduled_run_during_a_trigger_now_keeps_the_pending_tick():
    schedule, _ = register_schedule("race", ChargeCard, period=timedelta(hours=1), missed="coalesce_latest")
    assert tick().started == 1
    lost = claim_lost_in_unsafe_step(ChargeCard.type_name)

    with transaction.atomic():
        Schedule.objects.select_for_update().get(id=schedule.id)
        triggering = InThread(lambda: schedules.trigger(schedule.id))
        wait_blocked(1, "trigger now to wait for the schedule row")
        sweeping = InThread(sweep_expired)
        wait_blocked(2, "the sweep to wait for the schedule row behind the trigger")
    # The trigger went first: no slot was free, so its tick stayed pending; the parked run freed the slot.
    assert triggering.join() == {"started": 0, "pending": 1, "skipped": 0}
    assert sweeping.join().parked == 1

    assert ProcedureRun.objects.get(id=lost.id).status == "failed"
    schedule.refresh_from_db()
    unfinished = ProcedureRun.objects.filter(schedule_id=schedule.id).exclude(status__in=FINAL)
    assert unfinished.count() == 1  # the pending tick started when the parked run freed the slot
    assert (schedule.active_runs, schedule.pending_ticks, schedule.failures) == (1, [], 1)

