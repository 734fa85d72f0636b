"""``Procedure.using(...)``: submit options as one typed value, like ``Task.using()`` in ``django.tasks``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django_procedures.policy.options import Options

if TYPE_CHECKING:
    from django_procedures.handle import ProcedureHandle
    from django_procedures.procedure import Procedure


@dataclass(frozen=True, kw_only=True)
class SubmitOptions:
    """A procedure class with the options to submit it with; ``None`` leaves an option to the class.

    ``MyProcedure.using(queue="io", priority=5).submit(state)`` is
    ``MyProcedure.submit(state, queue="io", priority=5)``. The value is
    immutable: ``using()`` on it returns a copy with more options changed.
    """

    procedure: type[Procedure]
    queue: str | None = None
    priority: int | None = None
    run_after: datetime | timedelta | float | None = None
    key: str | None = None
    debounce: timedelta | float | None = None
    #: The options checked, once, where they are written; what the submits below carry down.
    _options: Options = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_options", Options(queue=self.queue, priority=self.priority,
                                                     run_after=self.run_after, key=self.key,
                                                     debounce=self.debounce))

    def using(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | float | None = None,
        key: str | None = None,
        debounce: timedelta | float | None = None,
    ) -> SubmitOptions:
        """A copy with the options given here changed."""
        changes: dict[str, Any] = {"queue": queue, "priority": priority, "run_after": run_after, "key": key,
                                   "debounce": debounce}
        return dataclasses.replace(self, **{name: value for name, value in changes.items() if value is not None})

    def submit(self, state: Mapping[str, Any] | None = None, *, parent: Any = None) -> ProcedureHandle:
        """Submit one procedure in the caller's transaction (see ``Procedure.submit``)."""
        from django_procedures import submitting

        return submitting.submit_one(self.procedure, state, self._options, parent=parent)

    def submit_many(self, states: Iterable[Mapping[str, Any] | None], *, keys: Iterable[str | None] | None = None,
                    parent: Any = None) -> list[ProcedureHandle]:
        """Submit one procedure per state in one INSERT (see ``Procedure.submit_many``).

        An idempotency key names one procedure, so ``using(key=...)`` cannot
        be shared by many: pass ``keys=[...]`` here instead.
        """
        if self.key is not None:
            raise TypeError(f"using(key={self.key!r}) names one procedure and cannot be given to submit_many(); "
                            "pass keys=[...] (one per state) to submit_many() instead")
        from django_procedures import submitting

        return submitting.submit_many(self.procedure, states, keys=keys, options=self._options, parent=parent)

    async def asubmit(self, state: Mapping[str, Any] | None = None, *, parent: Any = None) -> ProcedureHandle:
        """``submit()`` for async code (it commits at once unless the caller's sync code holds a transaction)."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.submit)(state, parent=parent)

    async def asubmit_many(self, states: Iterable[Mapping[str, Any] | None], *,
                           keys: Iterable[str | None] | None = None, parent: Any = None) -> list[ProcedureHandle]:
        """``submit_many()`` for async code."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.submit_many)(list(states), keys=keys, parent=parent)

    def child(self, state: Mapping[str, Any] | None = None) -> Procedure:
        """A child to return from ``Status.suspended([...])``, carrying these options.

        Children are created once, with the parent's checkpoint, so they take
        no idempotency key.
        """
        if self.debounce is not None:
            raise TypeError("using(debounce=...) cannot make a child: children are created once, with their "
                            "parent's checkpoint; drop debounce=")
        if self.key is not None:
            raise TypeError(f"using(key={self.key!r}) cannot make a child: children are created once, with their "
                            "parent's checkpoint, and take no idempotency key; drop key=")
        checked = self._options
        return self.procedure(state, queue=checked.queue, priority=checked.priority, run_after=checked.run_after)
