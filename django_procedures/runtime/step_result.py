"""What a step returned and left, checked before anything is written: its ``Status``, the state's JSON text and
size, the limits it asks for now, its children's rows. A refusal raises :class:`StepFailed`: the attempt fails."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from django_procedures import clock, submitting
from django_procedures.conf import conf
from django_procedures.exceptions import NonRetryable
from django_procedures.policy.limits import stored_limits
from django_procedures.policy.state import encode_state, find_problem, size_problem
from django_procedures.procedure import Procedure, Status, StepSpec
from django_procedures.runtime.running import error_text, trace_text
from django_procedures.store import transitions
from django_procedures.store.fence import StepRecord

if TYPE_CHECKING:
    from django_procedures.models import ProcedureRun


class StepFailed(Exception):
    """The attempt of ``record`` failed with ``error`` (its ``trace``), before anything was written."""

    def __init__(self, record: StepRecord, error: BaseException, trace: str) -> None:
        super().__init__(error_text(error))
        self.record, self.error, self.trace = record, error, trace


def limits_of(procedure: Procedure, record: StepRecord) -> list[list[Any]] | None:
    """``limits()`` asked of the new state; raising (or returning what is not a ``Limit``) fails the attempt."""
    try:
        return stored_limits(procedure.limits(), type(procedure).__qualname__)
    except Exception as error:
        raise StepFailed(record, error, trace_text()) from error


def measured(procedure: Procedure, spec: StepSpec, record: StepRecord) -> str:
    """The state's JSON text, refused over ``MAX_STATE_BYTES``; the write reuses it (see ``settle``)."""
    text = encode_state(procedure.state)
    problem = size_problem(text, conf.MAX_STATE_BYTES)
    if problem:
        raise StepFailed(record, NonRetryable(f"cannot save the checkpoint of step {spec.name}: {problem}"), "")
    return text


def unstorable(procedure: Procedure, status: Status) -> str | None:
    """Why the state (or a final output) a step left cannot be stored, or None."""
    if not isinstance(procedure.state, dict):
        return f"state is a {type(procedure.state).__name__}; it must be a dict (a JSON object)"
    problem = find_problem(procedure.state)
    if problem is None and status.kind == "done":
        problem = find_problem(status.output, "output")
    return problem


def child_rows(claim: Any, status: Status, record: StepRecord) -> tuple[ProcedureRun, ...]:
    """The rows of a suspension's children, checked before anything is written; a refusal fails the attempt."""
    bad = [c for c in status.children if not isinstance(c, Procedure) or type(c).abstract]
    if bad:
        raise StepFailed(record, NonRetryable(
            f"Status.suspended takes instances of concrete Procedure classes, like Child(state={{...}}); "
            f"got {bad[0]!r}"), "")
    try:
        now = clock.now()
        return tuple(transitions.child_rows(claim, submitting.child_runs(status.children, now), now))
    except BaseException as error:  # a child's state, options or lock keys were refused; nothing was written
        raise StepFailed(record, NonRetryable(f"cannot submit the children: {error_text(error)}"),
                          trace_text()) from error


def refuse_unawaited(result: Any, method: str, remedy: str) -> None:
    """Raise ``NonRetryable`` naming ``method`` (``"step fetch of Charge"``) when a plain def returned a
    coroutine (``remedy`` says what to do), an awaitable or an async generator: nothing awaits or iterates it
    there, so its work would silently not run. It is closed first (no "never awaited" warning besides this)."""
    if inspect.isasyncgen(result):
        raise NonRetryable(f"{method} returned an async generator: nothing iterates it, so its body never runs; "
                           "drop the yield and do (or await) the work instead")
    if not inspect.isawaitable(result):
        return
    what = "a coroutine" if inspect.iscoroutine(result) else f"an awaitable ({type(result).__name__})"
    close = getattr(result, "close", None)
    if close is not None:
        close()
    raise NonRetryable(f"{method} returned {what} but is a plain def: {remedy}")


def normalise(result: Any, cls: type[Procedure]) -> Status:
    """What a step returned as a plain ``Status`` (None: continue, or done for ``execute``); TypeError otherwise."""
    if result is None:
        return Status.done() if cls.uses_execute() else Status.executing()
    if not isinstance(result, Status) or result.kind not in ("executing", "suspended", "done", "sleeping",
                                                                         "waiting_for_event"):
        raise TypeError(f"a step must return None or a Status (Status.executing(), Status.done(...)); "
                        f"got {type(result).__name__}")
    # A plain copy, read here inside the step's try: what the executor reads later can no longer raise.
    return Status(result.kind, persist=bool(result.persist), children=tuple(result.children), output=result.output,
                  wake_at=result.wake_at, events=tuple(result.events))
