"""The optional hooks: ``on_child_failed`` when a parent resumes, and ``rollback`` after a permanent failure."""

from __future__ import annotations

import copy
from contextlib import nullcontext

from django.db import transaction

from django_procedures import clock
from django_procedures.exceptions import NonRetryable, NotActive
from django_procedures.policy.retry import FailDecision, decide_error
from django_procedures.policy.state import find_problem
from django_procedures.procedure import Procedure
from django_procedures.runtime.connections import set_transaction_timeout
from django_procedures.runtime.context import Context
from django_procedures.runtime.endings import Failed, Interrupted, RollbackFailed, RolledBack
from django_procedures.runtime.running import Outcome, RunningClaim, error_text, trace_text
from django_procedures.runtime.settle import settle, settle_last
from django_procedures.runtime.step_result import refuse_unawaited
from django_procedures.store import transitions
from django_procedures.store.db import own_connection_lost, session
from django_procedures.store.fence import StepRecord

#: What a hook that returned a coroutine should be instead (hooks run on a thread, inside the store's work).
_HOOK_REMEDY = ("it is called on a worker thread and never awaited, so its work did not run; do the work in it "
                "(call async code with asgiref.sync.async_to_sync)")


def _context(running: RunningClaim, step_name: str) -> Context:
    claim = running.claim
    return Context(procedure_id=claim.id, type_name=claim.type_name, attempt=claim.attempt, step_index=claim.step,
                   step_name=step_name, lease_token=claim.lease_token,
                   children=running.children)._attach(running.activity)


def fail_now(procedure: Procedure, cls: type[Procedure], running: RunningClaim, error: str, trace: str = "",
             *, record: StepRecord | None = None, manual_retry: bool = True,
             exception: BaseException | None = None) -> Outcome:
    """Fail for good: roll back first if the class can, else end ``failed``."""
    claim = running.claim
    rollback = cls.has_rollback() and not claim.in_rollback
    outcome = settle(running, Failed(record, error, trace, FailDecision(error, manual_retry), rollback=rollback,
                                     exception=exception))
    if outcome is Outcome.ROLLING_BACK:
        procedure.state = copy.deepcopy(claim.state)
        return run_rollback(procedure, cls, running)
    return outcome


def handle_children(procedure: Procedure, cls: type[Procedure], running: RunningClaim) -> Outcome | None:
    """A resumed parent: report failed children to ``on_child_failed``; None once no child is left."""
    claim = running.claim
    while True:
        stock = transitions.take_stock(claim)
        running.children = stock.children
        if stock.verdict == "continue":
            return None
        if stock.verdict == "waiting":
            return Outcome.SUSPENDED
        for child in stock.failures:
            before = session()
            try:
                running.activity.check()
                # Typed None, but a user's plain def may return a coroutine: that is what is refused here.
                returned = procedure.on_child_failed(_context(running, "on_child_failed"), child)  # type: ignore[func-returns-value]
                refuse_unawaited(returned, f"on_child_failed of {cls.__qualname__}", _HOOK_REMEDY)
                problem = find_problem(procedure.state)
                if problem:
                    raise NonRetryable(f"cannot save the state on_child_failed left: {problem}")
            except NotActive:
                return settle(running, Interrupted("stopped in on_child_failed"))
            except BaseException as error:  # foreign code: SystemExit, CancelledError... fail like any error
                if own_connection_lost(error, before):
                    raise  # not the hook's failure: the executor reconnects and runs the claim again
                procedure.state = copy.deepcopy(claim.state)
                return fail_now(procedure, cls, running, error_text(error), trace_text())
            transitions.handled_child_failure(claim, child.id, copy.deepcopy(procedure.state))


def run_rollback(procedure: Procedure, cls: type[Procedure], running: RunningClaim) -> Outcome:
    """Run ``rollback(ctx)`` under the lease; retried with the procedure's policy like a step."""
    claim = running.claim
    started = clock.now()
    running.current, running.effect_uncommitted = None, False  # a shutdown now releases it: the rollback resumes
    record = StepRecord(claim.step, "rollback", claim.attempt, started, started)
    before = session()  # so that own_connection_lost() can tell whose connection failed
    try:
        with transaction.atomic() if cls.rollback_atomic else nullcontext():
            if cls.rollback_atomic:
                set_transaction_timeout(transaction.get_connection())
            running.activity.check()
            returned = procedure.rollback(_context(running, "rollback"))  # type: ignore[func-returns-value]
            refuse_unawaited(returned, f"rollback of {cls.__qualname__}", _HOOK_REMEDY)
            running.activity.check()
            record = StepRecord(claim.step, "rollback", claim.attempt, started, clock.now())
            rolled_back = RolledBack(record)
            return settle_last(running, rolled_back) if cls.rollback_atomic else settle(running, rolled_back)
    except NotActive:
        return settle(running, Interrupted("stopped during the rollback"))
    except BaseException as error:  # foreign code: SystemExit, CancelledError... a failed rollback attempt
        if own_connection_lost(error, before):
            raise  # not the rollback's failure: the executor reconnects and runs it again
        record = StepRecord(claim.step, "rollback", claim.attempt, started, clock.now())
        decision = decide_error(cls.retry, error, failures_before=claim.failures, now=clock.now(),
                                permanent=(NonRetryable,))
        return settle(running, RollbackFailed(record, error_text(error), decision))
