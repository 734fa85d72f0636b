"""What users write: ``Procedure`` subclasses, ``@step``, ``Status`` and ``LockKey``."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar, overload

from django_procedures import class_checks, clock
from django_procedures.exceptions import ChildFailed, ProceduresConfigError
from django_procedures.policy.events import timeout_at, wait_names
from django_procedures.policy.options import Options
from django_procedures.policy.retry import RetryPolicy
from django_procedures.policy.waiting import wake_time

if TYPE_CHECKING:
    from django_procedures.handle import ProcedureHandle
    from django_procedures.policy.limits import Limit
    from django_procedures.policy.procedure_class import NewRun
    from django_procedures.runtime.context import Context
    from django_procedures.store.tree import ChildResult
    from django_procedures.submit_options import SubmitOptions

_R = TypeVar("_R")


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


class _class_or_instance(Generic[_R]):
    """A method bound to the class when called on it, and to the instance when called on one."""

    def __init__(self, func: Callable[..., _R]) -> None:
        self.__func__ = func
        functools.update_wrapper(self, func)  # type: ignore[arg-type]  # a descriptor: it takes the name and doc

    def __get__(self, instance: Any, owner: type) -> Callable[..., _R]:
        return types.MethodType(self.__func__, owner if instance is None else instance)


class Procedure:
    """A durable multi-step procedure; subclass it and add ``@step`` methods or ``execute``.

    ``self.state`` is a JSON object saved with every checkpoint. Class
    attributes: ``type_name`` (default ``"<module>.<QualName>"``), ``retry``,
    ``queue``, ``priority``, ``redact`` (state keys the admin masks),
    ``version`` and ``renamed_steps`` (see ``upgrade_state``). A class with
    ``abstract = True`` in its body is a base for others and is not registered.
    """

    type_name: ClassVar[str]
    retry: ClassVar[RetryPolicy] = RetryPolicy()
    queue: ClassVar[str | None] = None
    priority: ClassVar[int] = 0
    redact: ClassVar[tuple[str, ...]] = ()
    #: Stored on each run; raise it when the steps or the state's shape change (docs/changing-procedures.md).
    version: ClassVar[int] = 1
    #: Step names of older versions: ``{"old": "new"}``.
    renamed_steps: ClassVar[Mapping[str, str]] = {}
    #: Run ``rollback`` inside one database transaction (its database effects take place exactly once).
    rollback_atomic: ClassVar[bool] = True
    abstract: ClassVar[bool] = True
    steps: ClassVar[tuple[StepSpec, ...]] = ()
    #: Whether the class overrides ``lock_keys()`` (set for each subclass): the store asks only then.
    declares_lock_keys: ClassVar[bool] = False
    #: Whether the class overrides ``limits()`` (set for each subclass): asked only then.
    declares_limits: ClassVar[bool] = False

    def __init__(
        self,
        state: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        key: str | None = None,
        run_after: datetime | timedelta | float | None = None,
    ) -> None:
        """A procedure to submit (``instance.submit()``) or to return as a child from ``Status.suspended``.

        The options are checked here, so a bad one fails where it was written.
        """
        if state is not None and not isinstance(state, Mapping):
            raise TypeError(f"state must be a dict (a JSON object) or None; got {type(state).__name__} {state!r}")
        self.state: dict[str, Any] = dict(state) if state is not None else {}
        self._submit_options = Options(queue=queue, priority=priority, key=key, run_after=run_after)
        #: The options as given (checked), by name; what is submitted is ``_submit_options``.
        self.options: dict[str, Any] = {
            "queue": self._submit_options.queue, "priority": self._submit_options.priority,
            "key": self._submit_options.key, "run_after": self._submit_options.run_after}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "abstract" not in cls.__dict__:
            cls.abstract = False
        if "type_name" not in cls.__dict__:
            cls.type_name = f"{cls.__module__}.{cls.__qualname__}"
        cls.steps = _collect_steps(cls)
        cls.declares_lock_keys = cls.lock_keys is not Procedure.lock_keys
        cls.declares_limits = cls.limits is not Procedure.limits
        class_checks.check_class_attributes(cls)
        class_checks.refuse_async_methods(cls)
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

    def limits(self) -> list[Limit]:
        """Fleet-wide flow-control limits (``Limit.concurrency``, ``Limit.rate``) this procedure's attempts run
        under (none by default); see docs/flow-control.md.

        Called at submit with the submitted state (an error there is the caller's), and after each
        checkpoint with the new state. The store never calls it: the names and numbers are stored on the run.
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

    def upgrade_state(self, state: dict[str, Any], from_version: int) -> dict[str, Any]:
        """The state of a run written by ``from_version`` (older than ``version``), in this version's shape;
        called once before its next step, the result saved with its next checkpoint. Unchanged by default."""
        return state

    # -- submit options and async submits ----------------------------------------------------

    @classmethod
    def using(
        cls,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | float | None = None,
        key: str | None = None,
        debounce: timedelta | float | None = None,
    ) -> SubmitOptions:
        """This class with submit options: ``.submit(state)``, ``.submit_many(states)``, ``.child(state)``.

        Mirrors ``Task.using()`` in ``django.tasks``; an option left ``None``
        falls back to the class attribute (``queue``, ``priority``) or the default.
        """
        from django_procedures.submit_options import SubmitOptions

        return SubmitOptions(procedure=cls, queue=queue, priority=priority, run_after=run_after, key=key,
                             debounce=debounce)

    @classmethod
    async def asubmit(
        cls,
        state: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | float | None = None,
        parent: Any = None,
        debounce: timedelta | float | None = None,
    ) -> ProcedureHandle:
        """``submit()`` for async code (like ``Task.aenqueue``); outside a transaction it commits at once."""
        return await cls.using(queue=queue, priority=priority, run_after=run_after, key=key,
                               debounce=debounce).asubmit(state, parent=parent)

    @classmethod
    async def asubmit_many(
        cls,
        states: Iterable[Mapping[str, Any] | None],
        *,
        keys: Iterable[str | None] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | float | None = None,
        parent: Any = None,
    ) -> list[ProcedureHandle]:
        """``submit_many()`` for async code."""
        return await cls.using(queue=queue, priority=priority, run_after=run_after).asubmit_many(
            states, keys=keys, parent=parent)

    # -- submitting --------------------------------------------------------------------------

    @_class_or_instance
    def submit(
        target: type[Procedure] | Procedure,
        state: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | float | None = None,
        parent: Any = None,
        debounce: timedelta | float | None = None,
    ) -> ProcedureHandle:
        """Submit one procedure in the caller's transaction; an existing ``key`` returns its handle.

        With ``debounce`` (a ``timedelta`` or seconds; needs ``key``): while the procedure with ``key`` has
        not been claimed, this submit replaces its state and makes it due ``debounce`` from now; otherwise it
        submits a new one due then (the key moves to it).

        On the class, ``MyProcedure.submit(state, ...)`` submits ``state``. On
        an instance, ``MyProcedure(state, queue=...).submit()`` submits the
        instance's own state and options; giving a state, or an option the
        instance already has, is a ``TypeError`` (one value per option).
        """
        from django_procedures import submitting

        given = Options(key=key, queue=queue, priority=priority, run_after=run_after, debounce=debounce)
        if not isinstance(target, Procedure):
            return submitting.submit_one(target, state, given, parent=parent)
        cls = type(target)
        if state is not None:
            raise TypeError(f"{cls.__qualname__}(...).submit() submits the instance's own state; do not pass "
                            f"another one (call {cls.__qualname__}.submit(state) on the class for that)")
        own = target._submit_options.given()
        twice = sorted(set(given.given()) & set(own))
        if twice:
            raise TypeError(f"{', '.join(twice)} given both to {cls.__qualname__}(...) and to submit(); "
                            "give each option once")
        return submitting.submit_one(cls, target.state, Options(**own, **given.given()), parent=parent)

    @classmethod
    def submit_many(
        cls,
        states: Iterable[Mapping[str, Any] | None],
        *,
        keys: Iterable[str | None] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | float | None = None,
        parent: Any = None,
    ) -> list[ProcedureHandle]:
        """Submit one procedure per state in one INSERT; handles come back in order.

        ``states`` is a list of dicts (a dict alone is refused: it is one
        state); ``keys``, if given, a list with one key or ``None`` per state.
        """
        from django_procedures import submitting

        return submitting.submit_many(cls, states, keys=keys, parent=parent,
                                      options=Options(queue=queue, priority=priority, run_after=run_after))

    # -- what the store and the registry ask of a class (policy.procedure_class.ProcedureClass) ---

    @classmethod
    def _new_run(cls, state: Mapping[str, Any] | None, options: Options, *, now: datetime,
                 where: str = "state") -> NewRun:
        from django_procedures import submitting

        return submitting.new_run(cls, state, options, now=now, where=where)

    @classmethod
    def _stored_lock_keys(cls, state: Mapping[str, Any]) -> list[list[str]]:
        from django_procedures import submitting

        return submitting.lock_keys_of(cls, dict(state))

    @classmethod
    def _stored_limits(cls, state: Mapping[str, Any]) -> list[list[Any]] | None:
        from django_procedures import submitting

        return submitting.limits_of(cls, dict(state))


def registered(type_name: str) -> type[Procedure]:
    """The ``Procedure`` class registered as ``type_name`` (``UnknownProcedureType`` if none)."""
    from django_procedures import registry

    cls = registry.get(type_name)
    assert isinstance(cls, type) and issubclass(cls, Procedure)  # only Procedure.__init_subclass__ registers
    return cls


def _collect_steps(cls: type[Procedure]) -> tuple[StepSpec, ...]:
    if cls.uses_execute():  # @step(atomic=False, ...) on execute() applies to every call
        spec = getattr(cls.execute, "_procedure_step", None)
        is_async = inspect.iscoroutinefunction(cls.execute)
        if spec:
            return (StepSpec("execute", spec.atomic, spec.idempotent, spec.timeout, is_async),)
        return (StepSpec("execute", atomic=not is_async, is_async=is_async),)
    specs: dict[str, StepSpec] = {}
    for klass in reversed(cls.__mro__):
        for attr, value in vars(klass).items():
            spec = getattr(value, "_procedure_step", None)
            if isinstance(spec, StepSpec):
                specs[attr] = StepSpec(attr, spec.atomic, spec.idempotent, spec.timeout, spec.is_async)
    return tuple(specs.values())
