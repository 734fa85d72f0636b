"""The framework's ``task_finished`` signal, sent when a task's run reaches a final status.

Sent after the final transition commits, from the process that made it (the
worker, or the process that cancelled the run); at most once, like every
django-procedures signal.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from django_procedures import signals
from django_procedures.tasks.types import is_task_type

logger = logging.getLogger("django_procedures.tasks")

BACKEND_PATH = "django_procedures.tasks.ProceduresBackend"


def backend_alias() -> str | None:
    """The first ``TASKS`` alias configured with this backend."""
    for alias, params in getattr(settings, "TASKS", {}).items():
        if params.get("BACKEND") in (BACKEND_PATH, "django_procedures.tasks.backend.ProceduresBackend"):
            return alias
    return None


def _finished(sender: Any, procedure_id: Any, type_name: str, signal: Any = None, **kwargs: Any) -> None:
    # Every procedure's final transition comes here: a procedure's costs one prefix check, nothing more.
    if not is_task_type(type_name):
        return
    alias = backend_alias()
    if alias is None:
        return
    from django_procedures.tasks.runs import report_finished  # needs the framework, which only tasks imply

    report_finished(alias, procedure_id, done=signal is signals.procedure_done)


def connect() -> None:
    for signal in (signals.procedure_done, signals.procedure_failed, signals.procedure_cancelled,
                   signals.procedure_rolled_back):
        signal.connect(_finished, dispatch_uid="django_procedures.tasks.finished")
