"""The submit side of ``Procedure``: a class, its states and options become checked row data for the store.

Everything that can refuse a submission happens here, before the store is
called: the state (strict JSON, at most ``MAX_STATE_BYTES``), the options (an
``Options`` value, checked when made), the idempotency keys, and the user's
``lock_keys()``, asked once and checked. The store gets :class:`NewRun` values
and only writes rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django_procedures import clock
from django_procedures.conf import conf
from django_procedures.policy import options as checks
from django_procedures.policy.limits import stored_limits
from django_procedures.policy.options import Options
from django_procedures.policy.procedure_class import NewRun
from django_procedures.policy.state import StateTooLarge, check_state, encode_state, find_problem, size_problem
from django_procedures.store.submit import submit_runs

if TYPE_CHECKING:
    from django_procedures.handle import ProcedureHandle
    from django_procedures.procedure import Procedure


def lock_keys_of(cls: type[Procedure], state: dict[str, Any]) -> list[list[str]]:
    """The ``[[name, mode], ...]`` a procedure with ``state`` will hold, as stored on its row."""
    if not cls.declares_lock_keys:
        return []
    instance = cls.__new__(cls)
    instance.state = state
    keys = instance.lock_keys() or []
    stored: dict[str, str] = {}
    for key in keys:
        name, mode = getattr(key, "name", None), getattr(key, "mode", None)
        if not isinstance(name, str) or not name or mode not in ("exclusive", "shared"):
            raise TypeError(f"{cls.__qualname__}.lock_keys() must return LockKey.exclusive(name) or "
                            f"LockKey.shared(name) values; got {key!r}")
        problem = find_problem(name, f"the lock key name {name!r}")
        if problem:
            raise TypeError(f"{cls.__qualname__}.lock_keys() returned a key that cannot be stored: {problem}")
        if len(name) > 255:
            raise TypeError(f"{cls.__qualname__}.lock_keys() returned a key name of {len(name)} characters; "
                            "key names are at most 255 characters (hash long ones)")
        if stored.get(name) != "exclusive":  # asking twice keeps the stronger mode
            stored[name] = mode
    return [[name, stored[name]] for name in sorted(stored)]


def limits_of(cls: type[Procedure], state: dict[str, Any]) -> list[list[Any]] | None:
    """The limits a procedure with ``state`` declares, as stored on its row (None: unlimited); ``limits()``
    raising, or returning anything but ``Limit`` values, propagates to the caller (``TypeError`` for the latter)."""
    if not cls.declares_limits:
        return None
    instance = cls.__new__(cls)
    instance.state = state
    return stored_limits(instance.limits(), cls.__qualname__)


def new_run(cls: type[Procedure], state: Mapping[str, Any] | None, options: Options, *, now: datetime,
            where: str = "state") -> NewRun:
    """The row data of a run of ``cls`` with ``state`` submitted at ``now``; ``TypeError`` if the state is
    not strict JSON, ``StateTooLarge`` (a ``ValueError``) over ``MAX_STATE_BYTES``."""
    if cls.abstract:
        raise TypeError(f"{cls.__qualname__} is abstract; submit one of its concrete subclasses")
    if state is not None and not isinstance(state, Mapping):
        raise TypeError(f"state must be a dict (a JSON object); got {type(state).__name__}")
    plain = dict(state or {})
    check_state(plain, where)
    problem = size_problem(encode_state(plain), conf.MAX_STATE_BYTES, where)
    if problem:
        raise StateTooLarge(problem)
    return NewRun(
        type_name=cls.type_name, version=cls.version, state=plain, step_name=cls.steps[0].name,
        queue=options.queue if options.queue is not None else cls.queue or conf.DEFAULT_QUEUE,
        priority=cls.priority if options.priority is None else options.priority,
        run_at=checks.run_at(options.run_after if options.debounce is None else options.debounce, now),
        key=options.key, lock_keys=lock_keys_of(cls, plain), limits=limits_of(cls, plain))


def submit_one(cls: type[Procedure], state: Mapping[str, Any] | None, options: Options, *,
               parent: Any = None) -> ProcedureHandle:
    """Submit one procedure in the caller's transaction; an existing ``options.key`` returns its handle.

    With ``options.debounce`` the key's procedure, while no worker has claimed it, takes the new state and
    becomes due ``debounce`` from now (``store.debounce``).
    """
    if options.debounce is not None:
        return _submit_debounced(cls, state, options, parent)
    (handle,) = _submit(cls, [state], [options], parent)
    return handle


def submit_many(cls: type[Procedure], states: Iterable[Mapping[str, Any] | None], *,
                keys: Iterable[str | None] | None, options: Options, parent: Any = None) -> list[ProcedureHandle]:
    """Submit one procedure per state (with ``keys``, one key or ``None`` per state) in one INSERT."""
    if isinstance(states, Mapping | str | bytes):
        raise TypeError(f"submit_many takes a list of states (dicts); got one {type(states).__name__}. "
                        "To submit one procedure, use submit(state)")
    if keys is not None and isinstance(keys, Mapping | str | bytes):
        raise TypeError(f"keys must be a list with one key (or None) per state; got {type(keys).__name__}")
    if options.debounce is not None:
        raise ValueError("debounce keeps one pending procedure per key, so submit_many() does not take it; "
                         "submit each state with submit(state, key=..., debounce=...)")
    states = list(states)
    if keys is None:
        return _submit(cls, states, [options] * len(states), parent)
    keys = list(keys)
    if len(keys) != len(states):
        raise ValueError(f"got {len(states)} states but {len(keys)} keys; pass one key (or None) per state")
    for i, key in enumerate(keys):
        checks.check_key(key, f"keys[{i}]")
    return _submit(cls, states, [options if key is None else dataclasses.replace(options, key=key) for key in keys],
                   parent)


def _submit(cls: type[Procedure], states: Sequence[Mapping[str, Any] | None], options: Sequence[Options],
            parent: Any) -> list[ProcedureHandle]:
    from django_procedures.handle import ProcedureHandle

    now = clock.now()
    runs = [new_run(cls, state, each, now=now, where="state" if len(states) == 1 else f"states[{i}]")
            for i, (state, each) in enumerate(zip(states, options, strict=True))]
    return [ProcedureHandle(s.id, created=s.created) for s in submit_runs(runs, now=now, parent=parent)]


def _submit_debounced(cls: type[Procedure], state: Mapping[str, Any] | None, options: Options,
                      parent: Any) -> ProcedureHandle:
    from django_procedures.handle import ProcedureHandle
    from django_procedures.store.debounce import submit_debounced

    if options.key is None:
        raise ValueError("debounce needs a key: it keeps one pending procedure per key; pass key='...' naming "
                         "the work to debounce (e.g. f'reindex:{user_id}')")
    if parent is not None:
        raise ValueError("debounce cannot be used with parent: children are added to a running procedure once; "
                         "drop debounce= or parent=")
    now = clock.now()
    run = new_run(cls, state, options, now=now)
    submitted = submit_debounced(run, now=now)
    return ProcedureHandle(submitted.id, created=submitted.created)


def child_runs(children: Sequence[Procedure], now: datetime) -> list[NewRun]:
    """The row data of a suspension's children (instances made with their options); raises if one is refused."""
    runs = []
    for i, child in enumerate(children):
        if child._submit_options.key is not None:
            raise TypeError("children cannot carry an idempotency key: the suspension that creates them is "
                            "committed once, so they are never created twice; drop key=")
        runs.append(new_run(type(child), child.state, child._submit_options, now=now, where=f"children[{i}].state"))
    return runs
