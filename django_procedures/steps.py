"""What a step is declared with and what it returns: ``@step`` (its ``StepSpec``), ``Status`` and ``LockKey``."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, overload

from django_procedures import clock
from django_procedures.exceptions import ProceduresConfigError
from django_procedures.policy.events import timeout_at, wait_names
from django_procedures.policy.waiting import wake_time

if TYPE_CHECKING:
    from django_procedures.procedure import Procedure


@dataclass(frozen=True)
class StepSpec:
    """One step of a procedure as declared by ``@step``."""

    name: str
    atomic: bool = True
    idempotent: bool = True
    timeout: float | None = None
    #: An ``async def``: the worker awaits it on its event loop (never atomic, see ``docs/async.md``).
    is_async: bool = False


@overload
def step(func: Callable[..., Any], /) -> Callable[..., Any]: ...
@overload
def step(
    *, atomic: bool | None = None, idempotent: bool = True, timeout: float | timedelta | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...
def step(
    func: Callable[..., Any] | None = None,
    /,
    *,
    atomic: bool | None = None,
    idempotent: bool = True,
    timeout: float | timedelta | None = None,
) -> Any:
    """Mark a method as the next step of its procedure (steps run in class order).

    ``atomic`` (default True) runs the step and its checkpoint in one database
    transaction; ``atomic=False`` runs it outside any transaction, at least
    once. ``idempotent=False`` (never atomic) parks the procedure instead of
    re-running the step after its worker was lost. A step running longer than
    ``timeout`` seconds counts as a failed attempt and its result is fenced out.
    """
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    if timeout is not None and timeout <= 0:
        raise ValueError(f"step timeout must be positive; got {timeout}")
    if not idempotent and timeout is not None:
        raise TypeError(
            "a step with idempotent=False cannot have a timeout: a timed-out attempt would be retried while it "
            "may still be running; drop timeout= (or make the step idempotent)"
        )
    if not idempotent and atomic:
        raise TypeError(
            "a step with idempotent=False cannot be atomic: it stands for an effect outside the database; "
            "drop atomic=True"
        )
    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        is_async = inspect.iscoroutinefunction(f)
        if is_async and atomic:
            raise ProceduresConfigError(
                f"{f.__qualname__} is an async def step with atomic=True: an async step is never atomic (a "
                "transaction belongs to one thread's connection, and an awaiting step's queries run on others); "
                "drop atomic=True, or write the step as a plain def")
        resolved_atomic = (idempotent and not is_async) if atomic is None else atomic
        f._procedure_step = StepSpec(  # type: ignore[attr-defined]
            name=f.__name__, atomic=resolved_atomic, idempotent=idempotent, timeout=timeout, is_async=is_async
        )
        return f

    return mark(func) if func is not None else mark


@dataclass(frozen=True)
class Status:
    """What a step (or ``execute``) returns; ``None`` from a step means ``executing()``."""

    kind: Literal["executing", "suspended", "done", "sleeping", "waiting_for_event"]
    persist: bool = True
    children: tuple[Procedure, ...] = ()
    output: Any = None
    wake_at: datetime | None = None
    events: tuple[str, ...] = ()  # wait_for_event's names

    @classmethod
    def executing(cls, persist: bool = True) -> Status:
        """Continue; ``persist=False`` runs the next step without a checkpoint in between."""
        return cls("executing", persist=persist)

    @classmethod
    def suspended(cls, children: Iterable[Procedure], persist: bool = True) -> Status:
        """Submit ``children`` and wait until they have all finished.

        The children are checked when the step returns (the runtime fails the step as ``NonRetryable``
        for anything that is not a concrete ``Procedure`` instance without a key), not here.
        """
        return cls("suspended", persist=persist, children=tuple(children))

    @classmethod
    def done(cls, output: Any = None) -> Status:
        """Finish the procedure with ``output`` (JSON)."""
        return cls("done", output=output)

    @classmethod
    def sleep(cls, delay: timedelta | float | None = None, *, until: datetime | None = None) -> Status:
        """Checkpoint, then wait (holding no worker) until ``delay`` has passed or ``until`` (aware) has come;
        the next step runs then. ``ValueError`` for a negative, NaN or infinite delay, or a naive datetime."""
        return cls("sleeping", wake_at=wake_time(delay, until, now=clock.now()))

    @classmethod
    def wait_for_event(cls, *names: str, timeout: timedelta | float | None = None) -> Status:
        """Checkpoint, then wait (holding no worker) for an event of one of ``names`` or ``timeout`` (a ``timedelta``
        or seconds; None: none); the next step reads it as ``ctx.event`` (None after the timeout). docs/waiting.md"""
        return cls("waiting_for_event", events=wait_names(names), wake_at=timeout_at(timeout, now=clock.now()))


@dataclass(frozen=True)
class LockKey:
    """A named lock a procedure holds from its first claim until it is final."""

    name: str
    mode: Literal["exclusive", "shared"] = "exclusive"

    @classmethod
    def exclusive(cls, name: str) -> LockKey:
        return cls(name, "exclusive")

    @classmethod
    def shared(cls, name: str) -> LockKey:
        return cls(name, "shared")
