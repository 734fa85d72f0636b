"""The Tasks framework's names: ``django.tasks`` on Django 6.0+, the ``django-tasks`` backport on Django 5.2."""

from __future__ import annotations

from importlib.util import find_spec

from django.core.exceptions import ImproperlyConfigured

if find_spec("django.tasks"):
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
elif find_spec("django_tasks"):
    from django_tasks import task_backends  # type: ignore[no-redef]
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef]
    from django_tasks.base import (  # type: ignore[no-redef]
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import InvalidTaskError as InvalidTask  # type: ignore[no-redef]
    from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[no-redef]
    from django_tasks.signals import task_enqueued, task_finished, task_started  # type: ignore[no-redef]
else:  # pragma: no cover - depends on what is installed
    raise ImproperlyConfigured(
        "django_procedures.tasks needs Django's Tasks framework: use Django 6.0 or later, or on Django 5.2 "
        "install the backport with pip install 'django-procedures[tasks]' and add 'django_tasks' to INSTALLED_APPS"
    )

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
