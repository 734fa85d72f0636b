"""One procedure type per task function, ``task:<module path>``, whose one step calls the function.

A worker claims only the type names it has registered, and a task's type is
registered when its module is imported (its ``@task`` decorator runs). So a
worker that cannot import a task's module never claims it: the task waits for
a worker that can, and is reported as an unknown type meanwhile.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from typing import Any, ClassVar

from django_procedures import registry
from django_procedures.exceptions import NonRetryable, NotActive, UnknownProcedureType
from django_procedures.policy.retry import RetryPolicy, is_permanent
from django_procedures.procedure import Procedure, Status, step
from django_procedures.runtime.context import Context
from django_procedures.store.db import is_disconnect
from django_procedures.tasks import types
from django_procedures.tasks.compat import TaskContext, task_finished, task_started
from django_procedures.tasks.results import attempt_result, backend_class, read_result, succeeded
from django_procedures.tasks.types import type_name_of
from django_procedures.tasks.values import to_json

logger = logging.getLogger("django_procedures.tasks")

#: What a task runs when neither ``@task(retry=...)`` nor ``OPTIONS["RETRY"]`` says otherwise: once,
#: as the framework's documentation promises.
RUN_ONCE = RetryPolicy(max_attempts=1)

_lock = threading.Lock()


class TaskRaised(Exception):
    """An exception the task function raised, re-raised under a class named by its path.

    The attempt's error text (``<class path>: <message>``) then says exactly
    which exception it was, which is what ``TaskError.exception_class_path``
    reports; the original stays chained as ``__cause__`` in the traceback.
    """


class TaskRaisedNonRetryable(TaskRaised, NonRetryable):
    """A task's exception that its retry policy lists in ``non_retryable`` (or a ``NonRetryable``)."""


_wrappers: dict[tuple[str, bool], type[TaskRaised]] = {}


def exception_path(error: BaseException) -> str:
    kind = type(error)
    return f"{kind.__module__}.{kind.__qualname__}"


def raised(error: BaseException, retry: RetryPolicy) -> TaskRaised:
    """``error`` as a :class:`TaskRaised` named by its class path, retryable as ``retry`` says."""
    path = exception_path(error)
    final = is_permanent(retry, error, (NonRetryable,))
    with _lock:
        wrapper = _wrappers.get((path, final))
        if wrapper is None:
            base = TaskRaisedNonRetryable if final else TaskRaised
            wrapper = type(path, (base,), {"__module__": __name__, "__qualname__": path})
            _wrappers[(path, final)] = wrapper
    if final:
        return wrapper(str(error), manual_retry=getattr(error, "manual_retry", True))  # type: ignore[call-arg]
    return wrapper(str(error))


class TaskProcedure(Procedure):
    """The base of every task's procedure type; ``state`` is ``{"args": [...], "kwargs": {...}}``."""

    abstract = True
    #: The ``Task`` (as its module defines it) this type runs.
    task: ClassVar[Any]

    def call_task(self, ctx: Context) -> Status:
        args, kwargs, result = self._task_starts(ctx)
        try:
            value = type(self).task.call(*args, **kwargs)
        except (NotActive, KeyboardInterrupt):
            raise
        except BaseException as error:
            if is_disconnect(error):
                raise  # not the task's failure: the executor reconnects and runs it again
            raise raised(error, type(self).retry) from error
        return self._task_returned(ctx, value, result)

    async def acall_task(self, ctx: Context) -> Status:
        """``call_task`` for an ``async def`` task, awaited on the worker's event loop (``docs/async.md``)."""
        from asgiref.sync import sync_to_async

        args, kwargs, result = await sync_to_async(self._task_starts)(ctx)
        try:
            value = await type(self).task.acall(*args, **kwargs)
        except (NotActive, KeyboardInterrupt, asyncio.CancelledError):
            raise  # a cancellation (timeout, lost lease) must reach the worker as one
        except BaseException as error:
            if is_disconnect(error):
                raise  # not the task's failure: the executor reconnects and runs it again
            raise raised(error, type(self).retry) from error
        return await sync_to_async(self._task_returned)(ctx, value, result)

    def _task_starts(self, ctx: Context) -> tuple[list[Any], dict[str, Any], Any]:
        """The call's arguments (the ``TaskContext`` first, if the task takes one), and the running result."""
        task = type(self).task
        args, kwargs = list(self.state.get("args", [])), dict(self.state.get("kwargs", {}))
        _succeeded.pending = None
        result = None
        if task.takes_context or task_started.receivers or task_finished.receivers:
            result = attempt_result(ctx, task, args, kwargs)
        if task_started.receivers:
            # A failing receiver is logged; it never fails the task.
            for receiver, outcome in task_started.send_robust(sender=backend_class(task.backend), task_result=result):
                if isinstance(outcome, Exception):
                    logger.error("task_started receiver %r failed", receiver, exc_info=outcome,
                                 extra=ctx.log_extra())
        if task.takes_context:
            args.insert(0, TaskContext(task_result=result))
        return args, kwargs, result

    def _task_returned(self, ctx: Context, value: Any, result: Any) -> Status:
        task = type(self).task
        try:
            output = to_json(value, f"the return value of {task.module_path}")
        except TypeError as error:
            raise NonRetryable(f"{error}. Return JSON from the task; its arguments are kept, so the task can be "
                               "retried once it does") from None
        if result is not None:
            _succeeded.pending = (ctx.procedure_id, result, output)
        return Status.done(output=output)


#: The attempt this thread ran last, when it returned: ``(procedure id, running result, output)``. The
#: ``task_finished`` signal of its ``procedure_done`` (sent on this thread once the completion commits) is
#: built from it, without reading the run again.
_succeeded = threading.local()


def succeeded_here(procedure_id: Any) -> tuple[Any, Any] | None:
    """``(running result, output)`` of the attempt of ``procedure_id`` that this thread just completed, or None."""
    pending = getattr(_succeeded, "pending", None)
    if pending is None or pending[0] != procedure_id:
        return None
    _succeeded.pending = None
    return pending[1], pending[2]


def report_finished(alias: str, procedure_id: Any, *, done: bool) -> None:
    """Send ``task_finished`` for the task run ``procedure_id``, which just reached a final status.

    ``done``: it ended ``done``. A success on this thread is reported from what
    its worker holds; any other ending is read from the run.
    """
    if not task_finished.receivers:
        return
    attempt = succeeded_here(procedure_id) if done else None
    result = succeeded(*attempt) if attempt is not None else read_result(alias, procedure_id)
    task_finished.send(sender=backend_class(alias), task_result=result)


def _registered(cls: type[TaskProcedure]) -> bool:
    try:
        return registry.get(cls.type_name) is cls
    except UnknownProcedureType:
        return False


def procedure_for(task: Any, default_retry: RetryPolicy | None) -> type[TaskProcedure]:
    """The procedure type that runs ``task``, made and registered on first use.

    The first ``Task`` object seen for a function (the one its ``@task``
    decorator made) decides the type's retry policy and atomicity; copies made
    by ``task.using(...)`` run under the same type.
    """
    path = task.module_path
    cls = types.classes.get(path)
    if cls is not None and _registered(cls):
        return cls
    retry = getattr(task, "retry", None) or default_retry or RUN_ONCE
    atomic = bool(getattr(task, "atomic", False))

    def run(self: TaskProcedure, ctx: Context) -> Status:
        return self.call_task(ctx)

    async def arun(self: TaskProcedure, ctx: Context) -> Status:
        return await self.acall_task(ctx)

    arun.__name__ = "run"
    body = arun if inspect.iscoroutinefunction(task.func) else run

    with _lock:
        cls = types.classes.get(path)
        if cls is None or not _registered(cls):  # new, or forgotten by the registry (testing.isolated_registry)
            qualname = f"TaskProcedure[{path}]"
            cls = type(qualname, (TaskProcedure,), {
                "__module__": __name__, "__qualname__": qualname, "type_name": type_name_of(path),
                "retry": retry, "task": task, "run": step(atomic=atomic)(body),
            })
            types.classes[path] = cls
    return cls
