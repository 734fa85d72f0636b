"""``Procedure.using(...)``: submit options as one typed value, like ``Task.using()`` in ``django.tasks``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

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

    def __post_init__(self) -> None:
        # Checked where they are written, as a child's constructor does (submit checks them again).
        from django_procedures.policy import options

        options.check_queue(self.queue)
        options.check_priority(self.priority)
        options.check_key(self.key)
        options.check_run_after(self.run_after)

    def using(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | float | None = None,
        key: str | None = None,
    ) -> SubmitOptions:
        """A copy with the options given here changed."""
        changes: dict[str, Any] = {"queue": queue, "priority": priority, "run_after": run_after, "key": key}
        return dataclasses.replace(self, **{name: value for name, value in changes.items() if value is not None})

    def _options(self) -> dict[str, Any]:
        return {"queue": self.queue, "priority": self.priority, "run_after": self.run_after}

    def submit(self, state: Mapping[str, Any] | None = None, *, parent: Any = None) -> ProcedureHandle:
        """Submit one procedure in the caller's transaction (see ``Procedure.submit``)."""
        return self.procedure.submit(state, key=self.key, parent=parent, **self._options())

    def submit_many(self, states: Iterable[Mapping[str, Any] | None], *, keys: Iterable[str | None] | None = None,
                    parent: Any = None) -> list[ProcedureHandle]:
        """Submit one procedure per state in one INSERT (see ``Procedure.submit_many``).

        An idempotency key names one procedure, so ``using(key=...)`` cannot
        be shared by many: pass ``keys=[...]`` here instead.
        """
        if self.key is not None:
            raise TypeError(f"using(key={self.key!r}) names one procedure and cannot be given to submit_many(); "
                            "pass keys=[...] (one per state) to submit_many() instead")
        return self.procedure.submit_many(states, keys=keys, parent=parent, **self._options())

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
        if self.key is not None:
            raise TypeError(f"using(key={self.key!r}) cannot make a child: children are created once, with their "
                            "parent's checkpoint, and take no idempotency key; drop key=")
        return self.procedure(state, **self._options())
