"""Reading a task's ``TaskResult`` from its ``ProcedureRun``, ``Lease`` and ``Step`` rows."""

from __future__ import annotations

import builtins
import uuid
from dataclasses import MISSING, fields, replace
from functools import cache
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from django_procedures import clock
from django_procedures import exceptions as procedure_exceptions
from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.policy.status import LeaseOutcome, RunStatus, StepStatus
from django_procedures.tasks.compat import (
    InvalidTask,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
)
from django_procedures.tasks.types import TYPE_PREFIX, registered_task


class TaskCancelled(Exception):
    """Reported as the error of a task run that was cancelled (from the admin or ``handle.cancel()``)."""


STATUSES = {
    RunStatus.READY: TaskResultStatus.READY,
    RunStatus.RETRYING: TaskResultStatus.READY,
    RunStatus.RUNNING: TaskResultStatus.RUNNING,
    RunStatus.WAITING: TaskResultStatus.RUNNING,
    RunStatus.ROLLING_BACK: TaskResultStatus.RUNNING,
    RunStatus.DONE: TaskResultStatus.SUCCESSFUL,
    RunStatus.FAILED: TaskResultStatus.FAILED,
    RunStatus.ROLLED_BACK: TaskResultStatus.FAILED,
    RunStatus.CANCELLED: TaskResultStatus.FAILED,
}

_ROW = ("id", "type_name", "state", "status", "queue", "priority", "output", "error", "traceback", "created_at",
        "started_at", "finished_at")


def _task_of(module_path: str, alias: str) -> Any:
    """The task at ``module_path``: as registered in this process, else imported."""
    known = registered_task(module_path)
    if known is not None:
        return known
    try:
        found = import_string(module_path)
    except ImportError as error:
        raise ImportError(f"cannot import the task {module_path} in this process ({error}); import its module "
                          "(or deploy the code that defines it) to read its result") from error
    if isinstance(found, Task):
        return found
    if callable(found):  # a Task made directly from a module-level function, not by @task
        return task_backends[alias].task_class(func=found, backend=alias)
    raise ImportError(f"{module_path} is no longer a task function; its result cannot be read as a TaskResult")


def _exception_path(error: str) -> str:
    """The class path that begins an attempt's error text (``"<class>: <message>"``)."""
    head = error.split(":", 1)[0].strip()
    if "." in head and " " not in head:
        return head  # a task's own exception, named by its path (see runs.TaskRaised)
    if hasattr(builtins, head):
        return f"builtins.{head}"
    if hasattr(procedure_exceptions, head):
        return f"django_procedures.exceptions.{head}"
    return "builtins.Exception"


def read_result(alias: str, result_id: Any) -> TaskResult:
    """The ``TaskResult`` of the task run ``result_id``; ``TaskResultDoesNotExist`` if there is none."""
    try:
        pid = uuid.UUID(str(result_id))
    except ValueError:
        raise TaskResultDoesNotExist(result_id) from None
    row = ProcedureRun.objects.filter(id=pid, type_name__startswith=TYPE_PREFIX).values(*_ROW).first()
    if row is None:
        raise TaskResultDoesNotExist(result_id)
    task = _task_of(row["type_name"].removeprefix(TYPE_PREFIX), alias)
    return _build(alias, _as_enqueued(task, row["queue"], row["priority"], alias), row)


def _as_enqueued(task: Any, queue: str, priority: int, alias: str) -> Any:
    """``task`` with the queue and priority its run was enqueued with (itself when they are its defaults)."""
    if (task.queue_name, task.priority, task.backend) == (queue, priority, alias):
        return task
    try:
        return task.using(queue_name=queue, priority=priority, backend=alias)
    except InvalidTask:
        return task  # the backend's settings changed since the enqueue: the task as its module defines it


def backend_class(alias: str) -> type:
    """The class of the backend ``alias``: the framework's signals are sent with it as their sender.

    What ``type(task_backends[alias])`` is, without that lookup's cost on every
    attempt: the class is the one its ``BACKEND`` setting names.
    """
    try:
        return _class_at(settings.TASKS[alias]["BACKEND"])
    except (AttributeError, KeyError, TypeError, ImportError):
        return type(task_backends[alias])  # whatever the framework makes of that alias (or its error)


@cache
def _class_at(path: str) -> type:
    return import_string(path)


def attempt_result(ctx: Any, task: Any, args: list[Any], kwargs: dict[str, Any]) -> TaskResult:
    """The ``RUNNING`` result a task's own attempt sees (``TaskContext.task_result``, ``task_started``).

    Built from the claim the worker holds: a run's first claim reads nothing
    more; a later one reads its earlier attempts (leases and failed steps).
    """
    claim = ctx._claim
    if claim is None:  # pragma: no cover - every executor-made Context carries its claim
        row = ProcedureRun.objects.filter(id=ctx.procedure_id).values(*_ROW).get()
        row.update(status=RunStatus.RUNNING, state={"args": args, "kwargs": kwargs})
        return _build(task.backend, task, row)
    task = _as_enqueued(task, claim.queue, claim.priority, task.backend)
    if claim.lease_token == 1:
        # The run's first claim: no earlier attempt, so no error, and this claim is its one worker. What
        # _build makes of such a row, without its generic steps (this is every no-op task's hot path).
        return TaskResult(
            task=task, id=str(claim.id), status=TaskResultStatus.RUNNING, enqueued_at=claim.created_at,
            started_at=claim.started_at, finished_at=None, last_attempted_at=claim.started_at, args=args,
            kwargs=kwargs, backend=task.backend, errors=[], worker_ids=[claim.worker],
        )
    row = {"id": claim.id, "status": RunStatus.RUNNING, "state": {"args": args, "kwargs": kwargs}, "output": None,
           "error": "", "traceback": "", "created_at": claim.created_at, "started_at": claim.started_at,
           "finished_at": None}
    return _build(task.backend, task, row)


class _NotPlain(Exception):
    pass


def _plain_copy(value: Any) -> Any:
    """A copy of ``value`` made of plain dicts, lists and scalars (what the framework's ``normalize_json``
    returns unchanged); ``_NotPlain`` for anything else."""
    kind = type(value)
    if kind is dict:
        return {key if type(key) is str else _plain_copy(key): _plain_copy(item) for key, item in value.items()}
    if kind is list:
        return [_plain_copy(item) for item in value]
    if kind in (str, int, float, bool) or value is None:
        return value
    raise _NotPlain


#: How :func:`succeeded` fills a field of the new result: copied from the running one, or left as the
#: constructor leaves a field it does not take (its default, its default factory's value, or unset).
_COPY, _DEFAULT, _FACTORY, _UNSET = range(4)


@cache
def _fields(kind: type) -> tuple[tuple[str, int, Any], ...]:
    out: list[tuple[str, int, Any]] = []
    for f in fields(kind):
        if f.init:
            out.append((f.name, _COPY, None))
        elif f.default is not MISSING:
            out.append((f.name, _DEFAULT, f.default))
        elif f.default_factory is not MISSING:
            out.append((f.name, _FACTORY, f.default_factory))
        else:
            out.append((f.name, _UNSET, None))
    return tuple(out)


def succeeded(running: TaskResult, output: Any) -> TaskResult:
    """``running`` (an attempt's result) as it reads once the attempt has committed the run ``done``.

    What ``dataclasses.replace(running, status=SUCCESSFUL, finished_at=now)``
    makes, without running the framework's constructor again: its checks passed
    on ``running``, whose ``args`` and ``kwargs`` it already made JSON, so a
    plain copy of them is what it would make again.
    """
    finished_at = clock.now()
    kind: Any = type(running)
    try:
        args, kwargs = _plain_copy(running.args), _plain_copy(running.kwargs)
    except _NotPlain:  # changed since (by a task_started receiver): let the constructor convert or refuse it
        result = replace(running, status=TaskResultStatus.SUCCESSFUL, finished_at=finished_at)
    else:
        result = object.__new__(kind)
        for name, how, default in _fields(kind):
            if how != _UNSET:
                value = getattr(running, name) if how == _COPY else default if how == _DEFAULT else default()
                object.__setattr__(result, name, value)
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "finished_at", finished_at)
        object.__setattr__(result, "args", args)
        object.__setattr__(result, "kwargs", kwargs)
    object.__setattr__(result, "_return_value", output)
    return result


def _build(alias: str, task: Any, row: dict[str, Any]) -> TaskResult:
    """The result of the run ``row``, with its attempts' workers and errors read from its leases and steps."""
    claims = list(Lease.objects.filter(procedure_id=row["id"]).exclude(outcome=LeaseOutcome.RELEASED)
                  .order_by("token").values_list("worker", "claimed_at"))
    failures = list(Step.objects.filter(procedure_id=row["id"], status=StepStatus.FAILED)
                    .order_by("index", "attempt", "id").values_list("error", "traceback"))
    # Each failed attempt keeps its traceback; a row written before Step.traceback existed has only its error
    # text, and the run keeps the traceback of its latest failure.
    errors = [TaskError(exception_class_path=_exception_path(text), traceback=trace or text)
              for text, trace in failures]
    status = row["status"]
    last_error = failures[-1][0] if failures else None
    if errors and not failures[-1][1] and row["traceback"] and row["error"] == last_error:
        errors[-1] = TaskError(exception_class_path=errors[-1].exception_class_path, traceback=row["traceback"])
    if status == RunStatus.CANCELLED:
        errors.append(TaskError(exception_class_path=f"{__name__}.{TaskCancelled.__qualname__}",
                                traceback=f"{TaskCancelled.__qualname__}: {row['error'] or 'cancelled'}"))
    elif status in (RunStatus.FAILED, RunStatus.ROLLED_BACK) and (not failures or row["error"] != last_error):
        # Failed without a failed attempt of its own (lost too often, interrupted, failed while waiting).
        errors.append(TaskError(exception_class_path=_exception_path(row["error"]),
                                traceback=row["traceback"] or row["error"]))
    state = row["state"] or {}
    result = TaskResult(
        task=task, id=str(row["id"]), status=STATUSES[RunStatus(status)], enqueued_at=row["created_at"],
        started_at=row["started_at"], finished_at=row["finished_at"],
        last_attempted_at=claims[-1][1] if claims else None, args=list(state.get("args", [])),
        kwargs=dict(state.get("kwargs", {})), backend=alias, errors=errors,
        worker_ids=[worker for worker, _ in claims],
    )
    if status == RunStatus.DONE:
        object.__setattr__(result, "_return_value", row["output"])
    return result
