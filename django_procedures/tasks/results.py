"""Reading a task's ``TaskResult`` from its ``ProcedureRun``, ``Lease`` and ``Step`` rows."""

from __future__ import annotations

import builtins
import uuid
from typing import Any

from django.utils.module_loading import import_string

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
)
from django_procedures.tasks.runs import TYPE_PREFIX, registered_task


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
        from django_procedures.tasks.backend import ProceduresTask

        return ProceduresTask(func=found, backend=alias)
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
    try:
        task = task.using(queue_name=row["queue"], priority=row["priority"], backend=alias)
    except InvalidTask:
        pass  # the backend's settings changed since the enqueue: the task as its module defines it
    return _build(alias, task, row)


def running_result(procedure_id: uuid.UUID, task: Any, args: list[Any], kwargs: dict[str, Any]) -> TaskResult:
    """The ``RUNNING`` result a task's own attempt sees (``TaskContext.task_result``, ``task_started``)."""
    row = ProcedureRun.objects.filter(id=procedure_id).values(*_ROW).get()
    row.update(status=RunStatus.RUNNING, state={"args": args, "kwargs": kwargs})
    return _build(task.backend, task, row)


def _build(alias: str, task: Any, row: dict[str, Any]) -> TaskResult:
    claims = list(Lease.objects.filter(procedure_id=row["id"]).exclude(outcome=LeaseOutcome.RELEASED)
                  .order_by("token").values_list("worker", "claimed_at"))
    failures = list(Step.objects.filter(procedure_id=row["id"], status=StepStatus.FAILED)
                    .order_by("index", "attempt", "id").values_list("error", flat=True))
    errors = [TaskError(exception_class_path=_exception_path(text), traceback=text) for text in failures]
    status = row["status"]
    if errors and row["traceback"] and row["error"] == failures[-1]:
        # The run keeps the whole traceback of its latest failed attempt only.
        errors[-1] = TaskError(exception_class_path=errors[-1].exception_class_path, traceback=row["traceback"])
    if status == RunStatus.CANCELLED:
        errors.append(TaskError(exception_class_path=f"{__name__}.{TaskCancelled.__qualname__}",
                                traceback=f"{TaskCancelled.__qualname__}: {row['error'] or 'cancelled'}"))
    elif status in (RunStatus.FAILED, RunStatus.ROLLED_BACK) and (not failures or row["error"] != failures[-1]):
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
