"""``ProceduresBackend``: Django's Tasks framework on django-procedures' workers."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from django_procedures import clock
from django_procedures.policy.options import Options
from django_procedures.policy.retry import RetryPolicy
from django_procedures.store.submit import submit_runs
from django_procedures.submitting import new_run
from django_procedures.tasks import bridge, compat
from django_procedures.tasks.compat import BaseTaskBackend, InvalidTask, Task, TaskResult, TaskResultStatus
from django_procedures.tasks.results import read_result
from django_procedures.tasks.runs import procedure_for
from django_procedures.tasks.values import arguments_to_json


@dataclass(frozen=True, slots=True, kw_only=True)
class ProceduresTask(Task):  # type: ignore[misc]
    """A ``Task`` with this backend's options: ``@task(retry=RetryPolicy(...), atomic=True)``.

    ``retry`` (default: the backend's ``OPTIONS["RETRY"]``, else one attempt)
    says how often a failing task runs again; ``atomic`` runs the function and
    the task's completion in one database transaction.
    """

    retry: RetryPolicy | None = None
    atomic: bool = False

    def __post_init__(self) -> None:
        Task.__post_init__(self)  # validates; zero-argument super() does not work in a slots dataclass
        backend = self.get_backend()
        if isinstance(backend, ProceduresBackend):
            procedure_for(self, backend.default_retry)  # the worker that imports this module can claim it


def _retry_option(alias: str, value: Any) -> RetryPolicy | None:
    if value is None or isinstance(value, RetryPolicy):
        return value
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS']['RETRY'] must be a dict of RetryPolicy fields, "
                                   f"like {{'max_attempts': 3, 'initial_delay': 1.0}}; got {value!r}")
    try:
        return RetryPolicy(**value)
    except (TypeError, ValueError) as error:
        raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS']['RETRY'] is not a valid RetryPolicy: {error}") \
            from error


bridge.connect()


class ProceduresBackend(BaseTaskBackend):
    """Runs each enqueued task as one procedure run on ``procedures_worker``: leased, fenced, retried.

    ``enqueue`` writes in the caller's transaction; ``get_result`` reads the
    run from any process. ``OPTIONS["RETRY"]`` (a dict of ``RetryPolicy``
    fields) is the retry policy of tasks that set none.
    """

    task_class = ProceduresTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = set(self.options) - {"RETRY"}
        if unknown:
            raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS'] has unknown keys {sorted(unknown)}; "
                                       "the only option is 'RETRY'")
        self.default_retry = _retry_option(alias, self.options.get("RETRY"))

    def validate_task(self, task: Any) -> None:
        super().validate_task(task)
        retry = getattr(task, "retry", None)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidTask(f"retry must be a django_procedures.RetryPolicy(...); got {retry!r}")
        if not isinstance(getattr(task, "atomic", False), bool):
            raise InvalidTask(f"atomic must be True or False; got {task.atomic!r}")
        if getattr(task, "atomic", False) and inspect.iscoroutinefunction(task.func):
            raise InvalidTask(f"{task.module_path} is an async def task with atomic=True: an async task is never "
                              "atomic (a transaction belongs to one thread's connection); drop atomic=True")

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> TaskResult:
        """Write the task as a ``ready`` procedure run in the caller's transaction and return its result."""
        self.validate_task(task)
        cls = procedure_for(task, self.default_retry)
        try:
            plain_args, plain_kwargs = arguments_to_json(task.func, args, kwargs, takes_context=task.takes_context)
        except TypeError as error:
            raise TypeError(f"cannot enqueue {task.module_path}: {error}") from None
        now = clock.now()
        run = new_run(cls, {"args": plain_args, "kwargs": plain_kwargs}, now=now,
                      options=Options(queue=task.queue_name, priority=task.priority, run_after=task.run_after))
        (submitted,) = submit_runs([run], now=now)
        result = TaskResult(
            task=task, id=str(submitted.id), status=TaskResultStatus.READY, enqueued_at=now, started_at=None,
            finished_at=None, last_attempted_at=None, args=plain_args, kwargs=plain_kwargs, backend=self.alias,
            errors=[], worker_ids=[],
        )
        # Sent once the task exists for other processes: never for a transaction that rolls back.
        transaction.on_commit(lambda: compat.task_enqueued.send(type(self), task_result=result), robust=True)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The task's result as stored now; ``TaskResultDoesNotExist`` for an unknown id."""
        return read_result(self.alias, result_id)
