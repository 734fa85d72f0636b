"""Running a claimed procedure's steps, one checkpoint at a time, while the lease holds."""

from __future__ import annotations

import copy
import logging
import time
import traceback as tb
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db import DatabaseError, transaction

from django_procedures import clock, registry
from django_procedures.exceptions import LeaseLost, NonRetryable, NotActive
from django_procedures.policy.retry import RetryDecision, decide_failure, is_poisonous
from django_procedures.policy.state import find_problem
from django_procedures.procedure import Procedure, Status, StepSpec
from django_procedures.runtime.context import Activity, Context
from django_procedures.store import fence
from django_procedures.store.claim import Claim
from django_procedures.store.db import is_conflict

logger = logging.getLogger("django_procedures.worker")


class Outcome(StrEnum):
    COMPLETED = "completed"
    RETRIED = "retried"
    FAILED = "failed"
    RELEASED = "released"
    LOST = "lost"


@dataclass
class RunningClaim:
    """A claim being executed: its activity flags and the step in flight (read by shutdown)."""

    claim: Claim
    activity: Activity = field(default_factory=Activity)
    current: StepSpec | None = None
    in_step: bool = False
    step_index: int = 0
    step_attempt: int = 1
    step_started_at: datetime | None = None
    #: ``time.monotonic()`` after which the step in flight has run past its timeout.
    deadline: float | None = None


class _StepFailed(Exception):
    def __init__(self, record: fence.StepRecord, error: BaseException, trace: str) -> None:
        super().__init__(str(error))
        self.record, self.error, self.trace = record, error, trace


class _Interrupted(Exception):
    """The step (or the executor between steps) saw ``ensure_active()`` raise."""


def find_step(cls: type[Procedure], name: str) -> StepSpec | None:
    return next((s for s in cls.steps if s.name == name), None)


def _next_step(cls: type[Procedure], spec: StepSpec) -> StepSpec | None:
    if cls.uses_execute():
        return spec
    names = [s.name for s in cls.steps]
    position = names.index(spec.name) + 1
    return cls.steps[position] if position < len(names) else None


def _extra(claim: Claim) -> dict[str, Any]:
    return {"procedure_id": str(claim.id), "type_name": claim.type_name, "lease_token": claim.lease_token,
            "attempt": claim.attempt}


def execute(running: RunningClaim) -> Outcome:
    """Run ``running.claim`` until it finishes, fails an attempt, is released, or its lease is lost."""
    claim = running.claim
    cls = registry.get(claim.type_name)
    try:
        if is_poisonous(cls.retry, claim.lost):
            fence.fail_without_attempt(
                claim, f"worker lost {claim.lost} times during step {claim.step_name}; giving up as poisonous "
                f"(RetryPolicy.max_lost={cls.retry.max_lost})")
            return Outcome.FAILED
        procedure = cls.__new__(cls)
        Procedure.__init__(procedure, claim.state)
        while True:
            spec = find_step(cls, claim.step_name)
            if spec is None:
                fence.fail_without_attempt(
                    claim, f"step {claim.step_name!r} no longer exists in {claim.type_name} (removed or renamed by "
                    f"a deploy); restore it, or retry once a version that has it is deployed")
                return Outcome.FAILED
            if running.activity.stopping.is_set():
                fence.release(claim)
                return Outcome.RELEASED
            if running.activity.lost_reason:
                return Outcome.LOST
            outcome = _run_group(procedure, cls, spec, running)
            if outcome is not None:
                return outcome
    except LeaseLost:
        logger.info("procedure %s: lease token %s was lost; dropping this worker's result", claim.id,
                    claim.lease_token, extra=_extra(claim))
        return Outcome.LOST


def _run_group(procedure: Procedure, cls: type[Procedure], first: StepSpec, running: RunningClaim) -> Outcome | None:
    """Run ``first`` and the steps it chains with ``persist=False``; None after a checkpoint."""
    claim = running.claim
    saved_state = copy.deepcopy(claim.state)
    for conflict_try in range(1, 6):
        procedure.state = copy.deepcopy(saved_state)
        try:
            if first.atomic:
                with transaction.atomic():
                    return _run_steps(procedure, cls, first, running)
            if not first.idempotent:
                fence.enter_unsafe_step(claim)
            return _run_steps(procedure, cls, first, running)
        except _StepFailed as failed:
            return _record_failure(cls, claim, failed)
        except _Interrupted:
            return _interrupted(claim, running)
        except DatabaseError as error:
            if not (first.atomic and is_conflict(error) and not transaction.get_connection().in_atomic_block):
                raise
            logger.info("procedure %s: step transaction hit %s; running it again (%d)", claim.id, error,
                        conflict_try, extra=_extra(claim))
    raise AssertionError("unreachable")  # pragma: no cover - the fifth conflict re-raises above


def _run_steps(procedure: Procedure, cls: type[Procedure], spec: StepSpec, running: RunningClaim) -> Outcome | None:
    claim, activity = running.claim, running.activity
    index, attempt = claim.step, claim.attempt
    records: list[fence.StepRecord] = []
    while True:
        ctx = Context(procedure_id=claim.id, type_name=claim.type_name, attempt=attempt, step_index=index,
                      step_name=spec.name, lease_token=claim.lease_token, activity=activity)
        started, t0 = clock.now(), time.monotonic()
        running.current, running.step_index, running.step_attempt = spec, index, attempt
        running.step_started_at = started
        running.deadline = None if spec.timeout is None else t0 + spec.timeout
        running.in_step = True
        try:
            activity.check()
            body = procedure.execute if cls.uses_execute() else getattr(procedure, spec.name)
            status = _normalise(body(ctx), cls)
            elapsed = time.monotonic() - t0
            if spec.timeout is not None and elapsed > spec.timeout:
                raise TimeoutError(f"step {spec.name} ran {elapsed:.1f}s, past its timeout of {spec.timeout}s")
            activity.check()
        except NotActive as error:
            raise _Interrupted() from error
        except Exception as error:
            record = fence.StepRecord(index, spec.name, attempt, started, clock.now())
            raise _StepFailed(record, error, tb.format_exc()) from error
        finally:
            running.in_step, running.deadline = False, None
        record = fence.StepRecord(index, spec.name, attempt, started, clock.now())
        records.append(record)
        if status.kind == "suspended":
            error = NonRetryable("Status.suspended (sub-procedures) is not supported by this version yet",
                                 manual_retry=False)
            raise _StepFailed(record, error, "")
        following = None if status.kind == "done" else _next_step(cls, spec)
        problem = find_problem(procedure.state)
        if problem is None and following is None:
            problem = find_problem(status.output, "output")
        if problem:
            raise _StepFailed(record, NonRetryable(f"cannot save the checkpoint of step {spec.name}: {problem}"), "")
        if following is None:
            fence.complete(claim, records, procedure.state, status.output)
            return Outcome.COMPLETED
        if not status.persist and following.idempotent:
            index, attempt, spec = index + 1, 1, following
            continue
        fence.checkpoint(claim, records, procedure.state, following.name)
        return None


def _normalise(result: Any, cls: type[Procedure]) -> Status:
    if result is None:
        return Status.done() if cls.uses_execute() else Status.executing()
    if not isinstance(result, Status):
        raise TypeError(f"a step must return None or a Status (Status.executing(), Status.done(...)); "
                        f"got {type(result).__name__}")
    return result


def _error_text(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _record_failure(cls: type[Procedure], claim: Claim, failed: _StepFailed) -> Outcome:
    error = failed.error
    retryable = not isinstance(error, (NonRetryable, *cls.retry.non_retryable))
    decision = decide_failure(cls.retry, failures_before=claim.failures, now=clock.now(), retryable=retryable,
                              manual_retry=getattr(error, "manual_retry", True))
    fence.fail_attempt(claim, failed.record, _error_text(error), failed.trace, decision)
    outcome = Outcome.RETRIED if isinstance(decision, RetryDecision) else Outcome.FAILED
    log = logger.warning if outcome is Outcome.RETRIED else logger.error
    log("procedure %s step %s attempt %s failed (%s): %s", claim.id, failed.record.name, failed.record.attempt,
        outcome.value, _error_text(error), extra=_extra(claim))
    return outcome


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
    record = fence.StepRecord(running.step_index, spec.name, running.step_attempt, started, clock.now())
    error = TimeoutError(f"step {spec.name} ran past its timeout of {spec.timeout}s and was abandoned")
    try:
        _record_failure(registry.get(claim.type_name), claim, _StepFailed(record, error, ""))
    except LeaseLost:
        return False
    return True


def _interrupted(claim: Claim, running: RunningClaim) -> Outcome:
    if running.activity.lost_reason:
        logger.info("procedure %s: stopped: %s", claim.id, running.activity.lost_reason, extra=_extra(claim))
        return Outcome.LOST
    spec = running.current
    if spec is not None and not spec.idempotent:
        fence.fail_without_attempt(claim, f"interrupted during non-idempotent step {spec.name}")
        return Outcome.FAILED
    fence.release(claim)
    return Outcome.RELEASED
