"""The checks a ``Procedure`` subclass passes when it is defined, so that a mistake fails at import."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from django_procedures.exceptions import ProceduresConfigError
from django_procedures.policy import options
from django_procedures.policy.retry import RetryPolicy
from django_procedures.policy.versions import check_renamed_steps, check_version

if TYPE_CHECKING:
    from django_procedures.procedure import Procedure


def check_class_attributes(cls: type[Procedure]) -> None:
    """A class's ``queue``, ``priority``, ``retry`` and ``redact`` are checked when it is defined."""
    where = cls.__qualname__
    options.check_queue(cls.queue, f"{where}.queue")
    if cls.priority is None:
        raise TypeError(f"{where}.priority must be an int (higher runs first, default 0); got None")
    options.check_priority(cls.priority, f"{where}.priority")
    if not isinstance(cls.retry, RetryPolicy):
        raise TypeError(f"{where}.retry must be a RetryPolicy(...); got {type(cls.retry).__name__} {cls.retry!r}")
    redact = cls.redact
    if isinstance(redact, str) or not isinstance(redact, tuple | list | set | frozenset) or not all(
            isinstance(name, str) for name in redact):
        raise TypeError(f"{where}.redact must be a tuple of state keys (strings), like ('password',); "
                        f"got {redact!r}")
    try:
        check_version(cls.version, where)
        cls.renamed_steps = check_renamed_steps(cls.renamed_steps, [s.name for s in cls.steps], where)
    except ValueError as error:
        raise ProceduresConfigError(str(error)) from None


#: Methods the worker calls on a procedure object, besides its steps: always synchronously.
_CALLED_METHODS = ("rollback", "on_child_failed", "lock_keys", "limits", "upgrade_state")


def refuse_async_methods(cls: type[Procedure]) -> None:
    """Refuse, when the class is defined, what the worker cannot await: an async generator as a step or
    ``execute``, and an ``async def`` ``rollback``, ``on_child_failed``, ``lock_keys`` or ``upgrade_state``.

    ``async def`` steps and ``execute`` are awaited on the worker's event loop (``docs/async.md``); the methods
    above run inside the store's transactions, on a thread, so a coroutine would be returned unawaited.
    """
    where = f"{cls.__module__}.{cls.__qualname__}"
    for name in (*(s.name for s in cls.steps), "execute"):
        if inspect.isasyncgenfunction(getattr(cls, name, None)):
            raise ProceduresConfigError(
                f"{where}.{name} is an async generator (async def with yield): a step must return None or a "
                "Status; drop the yield (await the work instead)")
    for name in _CALLED_METHODS:
        method = getattr(cls, name, None)
        if inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method):
            raise ProceduresConfigError(
                f"{where}.{name} is an async def: {name}() is called on a worker thread inside the store's "
                f"transaction, never awaited; write it as a plain def (call async code from it with "
                "asgiref.sync.async_to_sync)")
