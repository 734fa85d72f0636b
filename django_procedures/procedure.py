"""What users write: ``Procedure`` subclasses (with ``@step``, ``Status`` and ``LockKey`` from ``steps``)."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from django_procedures import class_checks
from django_procedures.exceptions import ChildFailed
from django_procedures.policy.options import Options
from django_procedures.policy.retry import RetryPolicy
from django_procedures.steps import LockKey, Status, StepSpec, step

if TYPE_CHECKING:
    from django_procedures.handle import ProcedureHandle
    from django_procedures.policy.limits import Limit
    from django_procedures.policy.procedure_class import NewRun
    from django_procedures.runtime.context import Context
    from django_procedures.store.tree import ChildResult
    from django_procedures.submit_options import SubmitOptions

#: Where users have imported them from (``django_procedures`` re-exports them too).
__all__ = ["LockKey", "Procedure", "Status", "StepSpec", "registered", "step"]

_R = TypeVar("_R")


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
