"""The transitions of a claimed procedure that move it on (checkpoint, completion, suspension, sleep, giving it
back), each named for what it does; writes are fenced. A failed attempt's are in
:mod:`~django_procedures.store.failures`.

A write about a claimed run matches ``(id, lease_token)`` while the run is
leased, or :func:`fenced_update` raises ``LeaseLost``. The transitions to a
final status (:func:`complete`, and in ``failures`` a permanent ``fail_attempt``,
``park_interrupted``, ``finish_rollback``, ``fail_rollback``) go
through :func:`django_procedures.store.final.finalise`; a checkpoint or a
completion on PostgreSQL is one statement (:mod:`~django_procedures.store.progress_sql`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db.models import F

from django_procedures import clock, signals
from django_procedures.models import ProcedureRun, Step
from django_procedures.policy.procedure_class import NewRun
from django_procedures.policy.status import LeaseOutcome, RunStatus, StepStatus
from django_procedures.policy.waiting import WaitingFor
from django_procedures.store import progress_sql, tree
from django_procedures.store.claim import Claim
from django_procedures.store.db import is_postgresql, sole_statement
from django_procedures.store.events import send_after_commit
from django_procedures.store.fence import LEASE_CLEARED, StepRecord, close_lease, fenced_update, held_row, lost
from django_procedures.store.final import Ending, finish_one, joined
from django_procedures.store.notify import notify
from django_procedures.store.submit import Parent, insert, row_of

# -- forward progress --------------------------------------------------------------------------


def _committed(claim: Claim, records: Sequence[StepRecord]) -> None:
    for r in records:
        send_after_commit(signals.step_committed, procedure_id=claim.id, type_name=claim.type_name,
                          step_index=r.index, step_name=r.name)


def _done_rows(claim: Claim, records: Sequence[StepRecord], state: dict[str, Any]) -> list[Step]:
    """The ``Step`` rows of steps that ended done in this claim; the last carries the committed state."""
    last = len(records) - 1
    return [
        Step(procedure_id=claim.id, index=r.index, name=r.name, attempt=r.attempt, status=StepStatus.DONE,
             lease_token=claim.lease_token, started_at=r.started_at, finished_at=r.finished_at,
             state=state if i == last else None)
        for i, r in enumerate(records)
    ]


def _version_fields(claim: Claim) -> dict[str, Any]:
    """The class version that upgraded the claim's state (``runtime.versions.upgrade``), for the write that
    saves the state; nothing when the state was not upgraded."""
    fields: dict[str, Any] = {} if claim.upgraded_to is None else {"version": claim.upgraded_to}
    return {**fields, "limits": claim.new_limits} if claim.limits_changed else fields  # (and the state's limits)


def _upgraded(claim: Claim) -> None:
    """The write that saved the upgraded state committed it: the run now carries the new version."""
    if claim.upgraded_to is not None:
        claim.version, claim.upgraded_to = claim.upgraded_to, None
    claim.limits_changed = False


def _progress_fields(progress: dict[str, Any] | None, now: datetime) -> dict[str, Any]:
    """A held-back progress report (``runtime.progress.ProgressRecorder.take``) as fields of the run's write."""
    return {} if progress is None else {"progress": progress, "progress_updated_at": now}


def commit_checkpoint(claim: Claim, records: Sequence[StepRecord], state: dict[str, Any], next_step: str,
                      progress: dict[str, Any] | None = None, *, ends_transaction: bool = False) -> None:
    """Commit ``records`` and ``state``; the next step to run is ``next_step``; ``progress`` (a held-back
    report) rides along.

    Inside an atomic step this runs as the last statement of the step's own
    transaction, so the step's writes and its checkpoint commit together. On
    PostgreSQL it is one statement (see :mod:`~django_procedures.store.progress_sql`);
    with ``ends_transaction`` (the executor: nothing follows it in the transaction)
    it goes alone when the transaction holds nothing else (``db.sole_statement``).
    """
    with joined(ends_transaction):
        if is_postgresql():
            with sole_statement(ends_transaction):
                written = progress_sql.write_checkpoint(claim, records, state, next_step, progress=progress)
        else:
            now = clock.now()
            written = bool(held_row(claim).update(
                state=state, step=records[-1].index + 1, step_name=next_step, step_started_at=now,
                attempt=1, failures=0, lost=0, in_unsafe_step=False, **_progress_fields(progress, now),
                **_version_fields(claim)))
            if written:
                Step._writer.bulk_create(_done_rows(claim, records, state))
        if not written:
            raise lost(claim)
    _committed(claim, records)
    _upgraded(claim)
    claim.state, claim.step, claim.step_name = state, records[-1].index + 1, next_step
    claim.attempt, claim.failures, claim.lost = 1, 0, 0


def complete(claim: Claim, records: Sequence[StepRecord], state: dict[str, Any], output: Any,
             progress: dict[str, Any] | None = None, *, ends_transaction: bool = False) -> None:
    """Commit the last steps and finish the procedure ``done`` with ``output`` (a final transition);
    ``progress`` (a held-back report) rides along.

    On PostgreSQL the run, its ``Step`` rows and its lease are written by one
    statement, inside the final path's locks and hooks; with ``ends_transaction``
    (as :func:`commit_checkpoint`) it goes alone when nothing else is in the
    transaction and the finish hooks write nothing.
    """
    ending = Ending.of(claim)
    alone = ends_transaction and not ending.hooks_write

    def write() -> bool:
        if records and is_postgresql():
            with sole_statement(alone):
                written = progress_sql.write_checkpoint(claim, records, state, "", complete=True, output=output,
                                                      progress=progress)
            if not written:  # (the statement closed the lease and freed its limit slots)
                return False
        else:
            step, now = records[-1].index + 1 if records else claim.step, clock.now()
            if not held_row(claim).update(
                    status=RunStatus.DONE, state=state, step=step, step_name="", output=output,
                    finished_at=now, error="", traceback="", lease_owner="", lease_expires_at=None,
                    in_unsafe_step=False, **_progress_fields(progress, now), **_version_fields(claim)):
                return False
            if records:
                Step._writer.bulk_create(_done_rows(claim, records, state))
            close_lease(claim.id, claim.lease_token, LeaseOutcome.COMPLETED, queue=claim.queue)
        _committed(claim, records)
        return True

    if not finish_one(ending, write, failed=False, signal=signals.procedure_done, alone=alone and bool(records)):
        raise lost(claim)


def child_rows(claim: Claim, runs: Sequence[NewRun], now: datetime) -> list[ProcedureRun]:
    """The unsaved rows of a suspension's children (``runs``, checked by ``submitting.child_runs``)."""
    here = Parent(claim.id, claim.root_id or claim.id, claim.depth, claim.suspension + 1)
    return [row_of(run, now=now, parent=here, position=i) for i, run in enumerate(runs)]


def suspend(claim: Claim, records: Sequence[StepRecord], state: dict[str, Any], next_step: str,
            rows: Sequence[ProcedureRun], progress: dict[str, Any] | None = None) -> None:
    """Checkpoint, insert the children's ``rows`` (from :func:`child_rows`) and wait for them, in one transaction;
    ``progress`` (a held-back report) rides along.

    ``next_step`` is where the parent resumes once every child is final ("" when
    the suspending step was its last: it then finishes ``done``).
    """
    suspension = claim.suspension + 1
    with joined():
        fenced_update(claim, status=RunStatus.WAITING, waiting_for=WaitingFor.CHILDREN, state=state,
                      step=records[-1].index + 1, step_name=next_step, attempt=1, failures=0, lost=0,
                      pending_children=len(rows), suspension=suspension,
                      **LEASE_CLEARED, **_progress_fields(progress, clock.now()), **_version_fields(claim))
        Step._writer.bulk_create(_done_rows(claim, records, state))
        insert(list(rows))
        close_lease(claim.id, claim.lease_token, LeaseOutcome.COMPLETED, queue=claim.queue)
    _committed(claim, records)


def sleep(claim: Claim, records: Sequence[StepRecord], state: dict[str, Any], next_step: str, wake_at: datetime,
          progress: dict[str, Any] | None = None) -> None:
    """Checkpoint and wait for a timer until ``wake_at`` (``Status.sleep``), in one transaction; the lease ends,
    the lock keys stay held. ``progress`` (a held-back report) rides along.

    ``store.timers.wake_due`` makes it ``ready`` at ``wake_at``; it resumes at
    ``next_step`` ("" when it slept in its last step: it then finishes ``done``).
    Not an attempt: the attempt and the failure and lost budgets start afresh.
    """
    with joined():
        fenced_update(claim, status=RunStatus.WAITING, waiting_for=WaitingFor.TIMER, wake_at=wake_at, run_at=wake_at,
                      state=state, step=records[-1].index + 1, step_name=next_step, attempt=1, failures=0, lost=0,
                      **LEASE_CLEARED, **_progress_fields(progress, clock.now()), **_version_fields(claim))
        Step._writer.bulk_create(_done_rows(claim, records, state))
        close_lease(claim.id, claim.lease_token, LeaseOutcome.COMPLETED, queue=claim.queue)
        notify([claim.queue])  # idle workers read the next due time again: it may now be this wake time
    _committed(claim, records)


def handled_child_failure(claim: Claim, child_id: Any, state: dict[str, Any]) -> None:
    """``on_child_failed`` returned for ``child_id``: save the state it left, and never report that child again."""
    with joined():
        fenced_update(claim, state=state, step_started_at=clock.now(), **_version_fields(claim))
        # Only while it is still final: a child retried meanwhile must have its next failure reported.
        ProcedureRun._writer.filter(id=child_id, parent_id=claim.id, status__in=tree.FAILED_CHILD).update(
            failure_handled=True)
    _upgraded(claim)
    claim.state = state


def take_stock(claim: Claim) -> tree.Stock:
    """A resumed parent's children, in one transaction: what it goes on with, or it waits again.

    Counted under the parent's row lock, once the final transactions of its
    children in flight have committed: a child that finishes later finds the
    parent ``waiting`` again, and wakes it. ``verdict`` is ``"continue"`` (every
    child final, every failure reported), ``"failures"`` (report ``failures`` to
    ``on_child_failed``, then take stock again) or ``"waiting"`` (the parent
    waits again; its lease is closed).
    """
    with joined():
        pending = held_row(claim).select_for_update().values_list("pending_children", flat=True).first()
        if pending is None:
            raise lost(claim)
        unfinished = tree.unfinished_child(claim.id, claim.suspension)
        stock = tree.stock(claim.id, claim.suspension, unfinished=unfinished)
        if stock.verdict == "continue" and pending:
            fenced_update(claim, pending_children=0)
        elif stock.verdict == "waiting":
            left = tree.unfinished_count(claim.id, claim.suspension)
            fenced_update(claim, status=RunStatus.WAITING, waiting_for=WaitingFor.CHILDREN, pending_children=left,
                          **LEASE_CLEARED)
            close_lease(claim.id, claim.lease_token, LeaseOutcome.COMPLETED, queue=claim.queue)
    return stock


def enter_unsafe_step(claim: Claim) -> None:
    """Mark that a non-idempotent step starts now, so a lost worker parks the procedure instead of re-running it."""
    with joined():
        fenced_update(claim, in_unsafe_step=True, step_started_at=clock.now())


# -- giving the procedure back -----------------------------------------------------------------


def give_back(claim: Claim) -> None:
    """Give the procedure back as ``ready`` without counting an attempt; any late write is fenced out."""
    with joined():
        fenced_update(claim, status=RunStatus.READY, lease_token=F("lease_token") + 1, **LEASE_CLEARED)
        close_lease(claim.id, claim.lease_token, LeaseOutcome.RELEASED)
        notify([claim.queue])
    send_after_commit(signals.procedure_released, procedure_id=claim.id, type_name=claim.type_name)
