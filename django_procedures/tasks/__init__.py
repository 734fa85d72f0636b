"""Django's Tasks framework on django-procedures' workers: ``django_procedures.tasks.ProceduresBackend``.

Configure it in ``TASKS``; see docs/tasks.md. The names are imported lazily so
that ``django_procedures.tasks.discovery`` works without the framework installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["ProceduresBackend", "ProceduresTask", "TaskCancelled"]

_LAZY = {
    "ProceduresBackend": "django_procedures.tasks.backend",
    "ProceduresTask": "django_procedures.tasks.backend",
    "TaskCancelled": "django_procedures.tasks.results",
}

if TYPE_CHECKING:
    from django_procedures.tasks.backend import ProceduresBackend, ProceduresTask
    from django_procedures.tasks.results import TaskCancelled


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'django_procedures.tasks' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(module), name)
