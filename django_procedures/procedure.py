"""What users write: ``Procedure`` subclasses, ``@step``, ``Status`` and ``LockKey``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Literal, overload

from django_procedures.exceptions import ChildFailed
from django_procedures.policy.retry import RetryPolicy

if TYPE_CHECKING:
    from django_procedures.handle import ProcedureHandle
    from django_procedures.runtime.context import Context
    from django_procedures.store.tree import ChildResult
    from django_procedures.submit_options import SubmitOptions


@dataclass(frozen=True)
class StepSpec:
    """One step of a procedure as declared by ``@step``."""

    name: str
    atomic: bool = True
    idempotent: bool = True
    timeout: float | None = None


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
    resolved_atomic = idempotent if atomic is None else atomic

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        f._procedure_step = StepSpec(  # type: ignore[attr-defined]
            name=f.__name__, atomic=resolved_atomic, idempotent=idempotent, timeout=timeout
        )
        return f

    return mark(func) if func is not None else mark


@dataclass(frozen=True)
class Status:
    """What a step (or ``execute``) returns; ``None`` from a step means ``executing()``."""

    kind: Literal["executing", "suspended", "done"]
    persist: bool = True
    children: tuple[Procedure, ...] = ()
    output: Any = None

    @classmethod
    def executing(cls, persist: bool = True) -> Status:
        """Continue; ``persist=False`` runs the next step without a checkpoint in between."""
        return cls("executing", persist=persist)

    @classmethod
    def suspended(cls, children: Iterable[Procedure], persist: bool = True) -> Status:
        """Submit ``children`` and wait until they have all finished."""
        return cls("suspended", persist=persist, children=tuple(children))

    @classmethod
    def done(cls, output: Any = None) -> Status:
        """Finish the procedure with ``output`` (JSON)."""
        return cls("done", output=output)


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


class Procedure:
    """A durable multi-step procedure; subclass it and add ``@step`` methods or ``execute``.

    ``self.state`` is a JSON object saved with every checkpoint. Class
    attributes: ``type_name`` (default ``"<module>.<QualName>"``), ``retry``,
    ``queue``, ``priority``, ``redact`` (state keys the admin masks). A class
    with ``abstract = True`` in its body is a base for others and is not
    registered.
    """

    type_name: ClassVar[str]
    retry: ClassVar[RetryPolicy] = RetryPolicy()
    queue: ClassVar[str | None] = None
    priority: ClassVar[int] = 0
    redact: ClassVar[tuple[str, ...]] = ()
    #: Run ``rollback`` inside one database transaction (its database effects take place exactly once).
    rollback_atomic: ClassVar[bool] = True
    abstract: ClassVar[bool] = True
    steps: ClassVar[tuple[StepSpec, ...]] = ()

    def __init__(
        self,
        state: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        key: str | None = None,
        run_after: datetime | timedelta | None = None,
    ) -> None:
        self.state: dict[str, Any] = dict(state) if state is not None else {}
        self.options = {"queue": queue, "priority": priority, "key": key, "run_after": run_after}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "abstract" not in cls.__dict__:
            cls.abstract = False
        if "type_name" not in cls.__dict__:
            cls.type_name = f"{cls.__module__}.{cls.__qualname__}"
        cls.steps = _collect_steps(cls)
        if not cls.abstract:
            from django_procedures import registry

            registry.register(cls)

    # -- the body ---------------------------------------------------------------------------

    def execute(self, ctx: Context) -> Status | None:
        """Override for a state machine; by default the ``@step`` methods run in order."""
        raise NotImplementedError(f"{type(self).__name__} defines neither @step methods nor execute()")

    @classmethod
    def uses_execute(cls) -> bool:
        return cls.execute is not Procedure.execute

    def lock_keys(self) -> list[LockKey]:
        """Keys this procedure holds from its first claim until it is final (none by default).

        Called once, at submit, with the submitted state.
        """
        return []

    def on_child_failed(self, ctx: Context, child: ChildResult) -> None:
        """Called under this procedure's lease once per child that failed, rolled back or was cancelled.

        The default raises, failing this procedure: its unfinished descendants
        are cancelled and its rollback runs. Return instead to keep waiting for
        the remaining children.
        """
        raise ChildFailed(f"child {child.type_name} {child.id} ended {child.status}: {child.error}")

    def rollback(self, ctx: Context) -> None:
        """Override to undo the procedure's effects after a permanent failure (runs under a lease,
        retried with ``retry``); the procedure then ends ``rolled_back``."""

    @classmethod
    def has_rollback(cls) -> bool:
        return cls.rollback is not Procedure.rollback

    # -- submit options and async submits ----------------------------------------------------

    @classmethod
    def using(
        cls,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | None = None,
        key: str | None = None,
    ) -> SubmitOptions:
        """This class with submit options: ``.submit(state)``, ``.submit_many(states)``, ``.child(state)``.

        Mirrors ``Task.using()`` in ``django.tasks``; an option left ``None``
        falls back to the class attribute (``queue``, ``priority``) or the default.
        """
        from django_procedures.submit_options import SubmitOptions

        return SubmitOptions(procedure=cls, queue=queue, priority=priority, run_after=run_after, key=key)

    @classmethod
    async def asubmit(
        cls,
        state: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | None = None,
        parent: Any = None,
    ) -> ProcedureHandle:
        """``submit()`` for async code (like ``Task.aenqueue``); outside a transaction it commits at once."""
        return await cls.using(queue=queue, priority=priority, run_after=run_after, key=key).asubmit(
            state, parent=parent)

    @classmethod
    async def asubmit_many(
        cls,
        states: Iterable[Mapping[str, Any] | None],
        *,
        keys: Iterable[str | None] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | None = None,
        parent: Any = None,
    ) -> list[ProcedureHandle]:
        """``submit_many()`` for async code."""
        return await cls.using(queue=queue, priority=priority, run_after=run_after).asubmit_many(
            states, keys=keys, parent=parent)

    # -- submitting --------------------------------------------------------------------------

    @classmethod
    def submit(
        cls,
        state: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | None = None,
        parent: Any = None,
    ) -> ProcedureHandle:
        """Submit one procedure in the caller's transaction; an existing ``key`` returns its handle."""
        from django_procedures.store.submit import submit_many

        return submit_many(cls, [state], keys=[key], queue=queue, priority=priority, run_after=run_after,
                           parent=parent)[0]

    @classmethod
    def submit_many(
        cls,
        states: Iterable[Mapping[str, Any] | None],
        *,
        keys: Iterable[str | None] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | None = None,
        parent: Any = None,
    ) -> list[ProcedureHandle]:
        """Submit one procedure per state in one INSERT; handles come back in order."""
        from django_procedures.store.submit import submit_many

        return submit_many(cls, list(states), keys=None if keys is None else list(keys), queue=queue,
                           priority=priority, run_after=run_after, parent=parent)


def _collect_steps(cls: type[Procedure]) -> tuple[StepSpec, ...]:
    if cls.uses_execute():  # @step(atomic=False, ...) on execute() applies to every call
        spec = getattr(cls.execute, "_procedure_step", None)
        return (StepSpec("execute", spec.atomic, spec.idempotent, spec.timeout) if spec else StepSpec("execute"),)
    specs: dict[str, StepSpec] = {}
    for klass in reversed(cls.__mro__):
        for attr, value in vars(klass).items():
            spec = getattr(value, "_procedure_step", None)
            if isinstance(spec, StepSpec):
                specs[attr] = StepSpec(attr, spec.atomic, spec.idempotent, spec.timeout)
    return tuple(specs.values())
