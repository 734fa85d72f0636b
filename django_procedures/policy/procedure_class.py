"""What the store and the registry need of a procedure class, so that neither imports ``Procedure``.

``Procedure`` subclasses are ``ProcedureClass`` values (a class object
satisfies a protocol through its class attributes and class methods). The
procedure side turns a class, a state and its options into a :class:`NewRun`:
plain row data, checked, whose lock keys were already asked of the user's
``lock_keys()``; the store only writes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django_procedures.policy.options import Options


@dataclass(frozen=True, slots=True)
class NewRun:
    """One procedure to insert: its row's values that depend on the class, the state and the options."""

    type_name: str
    #: The class's ``version``, stored on the run (a worker of an older version leaves it alone).
    version: int
    state: dict[str, Any]
    step_name: str
    queue: str
    priority: int
    run_at: datetime
    key: str | None
    lock_keys: list[list[str]]
    #: Flow-control limits as stored (``policy.limits``), already asked of ``limits()``; None: unlimited.
    limits: list[list[Any]] | None = None


class NamedStep(Protocol):
    @property
    def name(self) -> str: ...


class ProcedureClass(Protocol):
    """A registered procedure class, as the registry and the store see it.

    The two methods are private on ``Procedure`` (a step of a user's class may not shadow them by accident).
    """

    @property
    def type_name(self) -> str: ...
    @property
    def abstract(self) -> bool: ...
    @property
    def queue(self) -> str | None: ...
    @property
    def priority(self) -> int: ...
    @property
    def steps(self) -> Sequence[NamedStep]: ...
    @property
    def declares_lock_keys(self) -> bool: ...
    @property
    def version(self) -> int: ...
    @property
    def renamed_steps(self) -> Mapping[str, str]: ...
    @property
    def declares_limits(self) -> bool: ...

    def _new_run(self, state: Mapping[str, Any] | None, options: Options, *, now: datetime,
                where: str = "state") -> NewRun:
        """A run of this class with ``state`` and ``options`` submitted at ``now``; raises if one is refused."""
        ...

    def _stored_lock_keys(self, state: Mapping[str, Any]) -> list[list[str]]:
        """The ``[[name, mode], ...]`` a run with ``state`` holds, checked (``lock_keys()`` asked once)."""
        ...

    def _stored_limits(self, state: Mapping[str, Any]) -> list[list[Any]] | None:
        """The limits a run with ``state`` runs under, as stored (``limits()`` asked once); None: none."""
        ...
