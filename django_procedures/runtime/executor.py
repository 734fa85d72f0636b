"""Running a claimed procedure's steps, one checkpoint at a time, while the lease holds."""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, Error, connection, transaction

from django_procedures import clock
from django_procedures.exceptions import LeaseLost, NonRetryable, NotActive
from django_procedures.policy.retry import FailDecision, RetryDecision, decide_error, decide_failure, is_poisonous
from django_procedures.policy.state import copy_state
from django_procedures.procedure import Procedure, StepSpec, registered
from django_procedures.runtime import awaiting, hooks, reconnect, write_lock
from django_procedures.runtime.awaiting import Execution, StepAwait
from django_procedures.runtime.connections import idle_cut_text, set_transaction_timeout
from django_procedures.runtime.context import Context
from django_procedures.runtime.endings import (
    Awaiting,
    Completed,
    Continued,
    Ended,
    Failed,
    Interrupted,
    Lost,
    RollbackFailed,
    Slept,
    Suspended,
)
from django_procedures.runtime.running import Outcome, RunningClaim, error_text, log_extra, logger, trace_text
from django_procedures.runtime.settle import fenced_out, settle, settle_last
from django_procedures.runtime.step_result import (
    StepFailed,
    child_rows,
    limits_of,
    measured,
    normalise,
    refuse_unawaited,
    unstorable,
)
from django_procedures.runtime.versions import find_step, missing_step, upgrade
from django_procedures.store import fence, transitions
from django_procedures.store.db import cut_while_idle, is_conflict, is_disconnect, own_connection_lost, session
from django_procedures.store.fence import StepRecord

if TYPE_CHECKING:
    pass

__all__ = ["Outcome", "RunningClaim", "execute", "execution", "fail_overdue", "record_crash"]


#: Times an atomic step's transaction is run again after a deadlock or serialization failure.
_CONFLICT_TRIES = 5


class _Interrupted(Exception):
    """The step (or the executor between steps) saw ``ensure_active()`` raise."""


def _next_step(cls: type[Procedure], spec: StepSpec) -> StepSpec | None:
    if cls.uses_execute():
        return spec
    names = [s.name for s in cls.steps]
    position = names.index(spec.name) + 1
    return cls.steps[position] if position < len(names) else None


def execute(running: RunningClaim) -> Outcome:
    """Run ``running.claim`` until it finishes, waits, fails an attempt, is released, or loses its lease.

    A lost database connection (restart, terminated backend) is not the
    step's fault and costs no attempt: the executor reconnects with backoff,
    re-reads the row under its lease and resumes from the last committed
    checkpoint (the interrupted transaction rolled back). An ``async def``
    step is awaited here, on this thread (``asgiref``'s ``async_to_sync``:
    its async ORM calls come back to this thread's connection, so ``drain()``
    runs it inside a ``TestCase``); a worker awaits it on its event loop
    instead (``runtime.lane``).
    """
    return awaiting.run_here(execution(running))


def execution(running: RunningClaim) -> Execution:
    """:func:`execute` as a generator that yields each ``async def`` step's :class:`~.awaiting.StepAwait` and is
    sent its result (or thrown its exception); whoever drives it decides where the coroutine is awaited."""
    for reconnects in range(reconnect.MAX_RECONNECTS + 1):
        try:
            return (yield from _execute(running))
        except Error as error:  # Django's InterfaceError is no DatabaseError
            if not is_disconnect(error):
                raise
            ended = reconnect.after_disconnect(running, error, reconnects)
            if ended is not None:
                return settle(running, ended)
    raise AssertionError("unreachable")  # pragma: no cover - the last round returns LOST


def _execute(running: RunningClaim) -> Execution:
    claim = running.claim
    cls = registered(claim.type_name)
    procedure = cls.__new__(cls)
    Procedure.__init__(procedure, copy_state(claim.state))
    try:
        if is_poisonous(cls.retry, claim.lost):
            where = "the rollback" if claim.in_rollback else f"step {claim.step_name}"
            message = (f"worker lost {claim.lost} times during {where}; giving up as poisonous "
                       f"(RetryPolicy.max_lost={cls.retry.max_lost})")
            if claim.in_rollback:
                now = clock.now()
                return settle(running, RollbackFailed(StepRecord(claim.step, "rollback", claim.attempt, now, now),
                                                      message, FailDecision(message, manual_retry=True)))
            return hooks.fail_now(procedure, cls, running, message)
        upgraded = upgrade(procedure, cls, running)
        if upgraded is not None:
            return upgraded
        if claim.in_rollback:
            return hooks.run_rollback(procedure, cls, running)
        if claim.suspension:
            outcome = hooks.handle_children(procedure, cls, running)
            if outcome is not None:
                return outcome
        if claim.step_name == "":  # resumed after a suspension in the last step
            return settle(running, Completed((), claim.state, None))
        while True:
            spec = find_step(cls, claim.step_name)
            if spec is None:
                return missing_step(procedure, cls, running)
            if running.activity.lost_reason:  # noticed before the (next) step: the INFO line all lost claims log
                return settle(running, Lost(running.activity.lost_reason))
            if running.activity.stopping.is_set():
                return settle(running, Interrupted("the worker is shutting down (between steps)"))
            outcome = yield from _run_group(procedure, cls, spec, running)
            if outcome is not Outcome.CONTINUED:
                return outcome
    except LeaseLost:  # refused by the fence outside the settle point (taking stock of children, an unsafe step)
        return fenced_out(running)
    except DatabaseError as error:
        if is_disconnect(error) and not cut_while_idle(error):
            raise  # a lost connection costs no attempt: execute() reconnects and resumes
        # A worker frozen past its lease (SIGSTOP, VM pause) finds its step's transaction cut by
        # idle_in_transaction_session_timeout when it wakes. If the lease moved meanwhile, this is the
        # fenced-out case (drop the result, log once at INFO), not an error.
        if _lease_moved(running):
            return fenced_out(running, f"its transaction ended with: {error}")
        # Still ours: the database refused the step's transaction (cut while idle, or a conflict that kept
        # coming back). That is a failed attempt, recorded on a fresh connection and retried by the policy.
        record = StepRecord(claim.step, claim.step_name, claim.attempt, clock.now(), clock.now())
        failed = StepFailed(record, DatabaseError(_database_hint(error, claim.step_name)), trace_text())
        return _record_failure(procedure, cls, running, failed)


def _database_hint(error: DatabaseError, step_name: str) -> str:
    if cut_while_idle(error):
        return idle_cut_text(error, transaction.get_connection(), f"step {step_name}")
    text = str(error).strip()
    if "idle-in-transaction" in text or "idle_in_transaction" in text:
        return (f"{text} (the step's transaction stayed idle longer than idle_in_transaction_session_timeout: "
                "move slow non-database work to a @step(atomic=False) step, or raise "
                "PROCEDURES['IDLE_IN_TRANSACTION_TIMEOUT_SECONDS'])")
    return text


def _lease_moved(running: RunningClaim) -> bool:
    """After a database error outside any transaction: is the lease gone? False when that cannot be told."""
    if running.activity.lost_reason:
        return True
    connection = transaction.get_connection()
    if connection.in_atomic_block:
        return False
    connection.close()  # the error may have broken it; the check opens a fresh one
    try:
        return not fence.holds(running.claim)
    except DatabaseError:
        connection.close()
        return False


def _run_group(procedure: Procedure, cls: type[Procedure], first: StepSpec, running: RunningClaim) -> Execution:
    """Run ``first`` and the steps it chains with ``persist=False``, and settle how they ended (``CONTINUED``
    after a checkpoint). An atomic group's checkpoint is settled inside its own transaction."""
    claim = running.claim
    saved_state = claim.state  # the committed state: never changed in place (the procedure works on copies)
    for conflict_try in range(1, _CONFLICT_TRIES + 1):
        procedure.state = copy_state(saved_state)
        try:
            if first.atomic:
                with transaction.atomic(), write_lock.held(running):
                    set_transaction_timeout(transaction.get_connection())
                    return settle_last(running, awaiting.no_await(_run_steps(procedure, cls, first, running)))
            if not first.idempotent:
                transitions.enter_unsafe_step(claim)
            return settle(running, (yield from _run_steps(procedure, cls, first, running)))
        except StepFailed as failed:
            procedure.state = copy_state(saved_state)
            return _record_failure(procedure, cls, running, failed)
        except _Interrupted:
            return settle(running, Interrupted(f"stopped during step {running.current.name}"
                                               if running.current else "stopped"))
        except DatabaseError as error:
            retry = first.atomic and is_conflict(error) and not transaction.get_connection().in_atomic_block
            if not retry or conflict_try == _CONFLICT_TRIES:
                raise
            logger.info("procedure %s: step transaction hit %s; running it again (%d)", claim.id, error,
                        conflict_try, extra=log_extra(claim))
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _run_steps(procedure: Procedure, cls: type[Procedure], spec: StepSpec,
               running: RunningClaim) -> Generator[StepAwait, Any, Ended]:
    """Run the group's steps; how they ended (a checkpoint, a completion, a suspension, a sleep) for :func:`settle`."""
    claim, activity = running.claim, running.activity
    index, attempt = claim.step, claim.attempt
    running.group_step = claim.step
    safe = spec.idempotent  # of the group's first step: whether a lost write may run it again
    records: list[StepRecord] = []
    while True:
        ctx = Context(procedure_id=claim.id, type_name=claim.type_name, attempt=attempt, step_index=index,
                      step_name=spec.name, lease_token=claim.lease_token,
                      children=running.children)._attach(activity, running.progress, claim)
        started, t0 = clock.now(), time.monotonic()
        running.current, running.step_index, running.step_attempt = spec, index, attempt
        running.step_started_at = started
        running.deadline = None if spec.timeout is None else t0 + spec.timeout
        before = session()  # so that own_connection_lost() can tell whose connection failed
        running.in_step = True
        closed = False  # the driver closed the generator at the yield: not the step's GeneratorExit
        try:
            activity.check()
            body = procedure.execute if cls.uses_execute() else getattr(procedure, spec.name)
            running.effect_uncommitted = not spec.idempotent  # from here a stop parks it (policy.interruption)
            result = body(ctx)
            if spec.is_async:  # the driver awaits it (with the timeout) and sends back what it returned
                try:
                    result = yield StepAwait(result, spec, running)  # type: ignore[arg-type]  # checked by run()
                except GeneratorExit:
                    closed = True
                    raise
            else:
                refuse_unawaited(result, f"step {spec.name} of {cls.__qualname__}",
                                 f"declare it async def {spec.name}(self, ctx) so that the worker awaits it")
            status = normalise(result, cls)
            elapsed = time.monotonic() - t0
            if spec.timeout is not None and elapsed > spec.timeout:
                raise TimeoutError(f"step {spec.name} ran {elapsed:.1f}s, past its timeout of {spec.timeout}s")
            activity.check_lease()
            problem = unstorable(procedure, status)  # walks what the step left: it may hold foreign objects
        except NotActive as error:
            raise _Interrupted() from error
        except BaseException as error:  # a step is foreign code: SystemExit, CancelledError... end the attempt
            if closed:
                raise  # closed by its driver (a worker that exits): nothing more is run or written
            if not spec.is_async and own_connection_lost(error, before):  # an async step's queries are not ours
                raise  # the worker's connection died under the step: not its failure (see execute)
            record = StepRecord(index, spec.name, attempt, started, clock.now())
            if cut_while_idle(error):  # the step's own query met its cut session
                error = DatabaseError(idle_cut_text(error, transaction.get_connection(), f"step {spec.name}"))
            raise StepFailed(record, error, trace_text()) from error
        finally:
            running.in_step, running.deadline = False, None
        record = StepRecord(index, spec.name, attempt, started, clock.now())
        records.append(record)
        following = None if status.kind == "done" else _next_step(cls, spec)
        if problem:
            raise StepFailed(record, NonRetryable(f"cannot save the checkpoint of step {spec.name}: {problem}"), "")
        chained = status.kind == "executing" and not status.persist
        if chained and following is not None and spec.idempotent and following.idempotent:
            index, spec = index + 1, following  # the group is one try: its steps share its attempt number
            running.progress.step_ended()  # no write follows: a report held back past its interval is written
            continue
        done, state, text = tuple(records), procedure.state, measured(procedure, spec, record)
        if cls.declares_limits:  # the next claim runs under the limits of the state this write saves
            claim.new_limits, claim.limits_changed = limits_of(procedure, record), True
        resume_at = following.name if following else ""  # "" after the last step: it then completes
        if status.kind == "suspended" and status.children:
            rows = child_rows(claim, status, record)
            return Suspended(done, state, resume_at, rows, safe=safe, state_text=text)
        if status.kind == "sleeping" and status.wake_at is not None:
            return Slept(done, state, resume_at, status.wake_at, safe=safe, state_text=text)
        if status.kind == "waiting_for_event" and status.events:
            return Awaiting(done, state, resume_at, status.events, status.wake_at, safe=safe, state_text=text)
        if following is None:
            return Completed(done, state, status.output, safe=safe, state_text=text)
        return Continued(done, state, following.name, safe=safe, state_text=text)


def _record_failure(procedure: Procedure, cls: type[Procedure], running: RunningClaim,
                    failed: StepFailed) -> Outcome:
    claim, error = running.claim, failed.error
    running.progress.before_failure()
    decision = decide_error(cls.retry, error, failures_before=claim.failures, now=clock.now(),
                            permanent=(NonRetryable,))
    if not isinstance(decision, RetryDecision):
        return hooks.fail_now(procedure, cls, running, error_text(error), failed.trace, record=failed.record,
                              manual_retry=decision.manual_retry, exception=error)
    return settle(running, Failed(failed.record, error_text(error), failed.trace, decision, exception=error))


def fail_overdue(running: RunningClaim) -> bool:
    """Fail the attempt of a step still running past its timeout; its late result is fenced out.

    Called from the heartbeat thread. The step's thread stays busy until the
    step returns, but its ``ensure_active()`` raises and nothing it writes can
    commit. Returns False if the step ended (or the lease moved) meanwhile.
    """
    spec, started = running.current, running.step_started_at
    if not running.in_step or spec is None or started is None:
        return False
    claim = running.claim
    running.activity.lose(f"step {spec.name} ran past its timeout of {spec.timeout}s")
    record = StepRecord(running.step_index, spec.name, running.step_attempt, started, clock.now())
    error = TimeoutError(f"step {spec.name} ran past its timeout of {spec.timeout}s and was abandoned")
    cls = registered(claim.type_name)
    decision = decide_failure(cls.retry, failures_before=claim.failures, now=clock.now(), retryable=True)
    # The step's thread is still busy: a rollback is handed to the next claim, never run on this thread.
    ended = Failed(record, error_text(error), "", decision, rollback=cls.has_rollback(), hand_off=True,
                   at_step=running.group_step, exception=error)
    return settle(running, ended) is not Outcome.LOST


def record_crash(running: RunningClaim, error: BaseException, trace: str) -> Outcome:
    """Last resort once :func:`execute` itself raised: record a failed attempt whose text can be stored.

    It counts against ``max_attempts`` like any failed attempt (a rollback is
    left to the next claim). When even that cannot be written the claim is
    LOST: its lease expires and another worker resumes it, counted against
    ``max_lost``.
    """
    claim = running.claim
    where = "the rollback" if claim.in_rollback else f"step {claim.step_name}"
    message = f"the worker could not record the outcome of {where}: {error_text(error)}"
    connection.close()  # whatever went wrong may have left the connection broken or mid-transaction
    try:
        cls = registered(claim.type_name)
        now = clock.now()
        record = StepRecord(claim.step, "rollback" if claim.in_rollback else claim.step_name, claim.attempt,
                            running.step_started_at or now, now)
        decision = decide_failure(cls.retry, failures_before=claim.failures, now=now, retryable=True)
        if claim.in_rollback:
            return settle(running, RollbackFailed(record, message, decision))
        return settle(running, Failed(record, message, trace, decision, rollback=cls.has_rollback(), hand_off=True))
    except Exception:
        logger.exception("procedure %s: could not record the failed attempt either; its lease will expire and "
                         "another worker will resume it", claim.id, extra=log_extra(claim))
        connection.close()
        return Outcome.LOST
