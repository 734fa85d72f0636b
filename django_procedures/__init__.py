"""Durable multi-step procedures for Django.

The public names are imported lazily so that importing the package (for
example from ``settings.py`` or a pure-policy test) never touches Django's
app registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"  # the one place the version is written: pyproject.toml reads it from here

__all__ = [
    "ChildResult",
    "Context",
    "EventNotDelivered",
    "Limit",
    "LockKey",
    "NoOutput",
    "NonRetryable",
    "Procedure",
    "ProcedureHandle",
    "RetryPolicy",
    "RunStatus",
    "Status",
    "SubmitOptions",
    "__version__",
    "aget_handle",
    "declare_schedule",
    "delete_schedule",
    "get_handle",
    "pause_schedule",
    "register_schedule",
    "resume_schedule",
    "send_event",
    "step",
    "tick",
    "trigger_schedule",
]

_LAZY = {
    "Limit": "django_procedures.policy.limits",
    "LockKey": "django_procedures.procedure",
    "Procedure": "django_procedures.procedure",
    "Status": "django_procedures.procedure",
    "step": "django_procedures.procedure",
    "RetryPolicy": "django_procedures.policy.retry",
    "NonRetryable": "django_procedures.exceptions",
    "ProcedureHandle": "django_procedures.handle",
    "get_handle": "django_procedures.handle",
    "aget_handle": "django_procedures.handle",
    "NoOutput": "django_procedures.exceptions",
    "EventNotDelivered": "django_procedures.exceptions",
    "send_event": "django_procedures.sending",
    "RunStatus": "django_procedures.policy.status",
    "Context": "django_procedures.runtime.context",
    "ChildResult": "django_procedures.store.tree",
    "SubmitOptions": "django_procedures.submit_options",
    "trigger_schedule": "django_procedures.scheduling",
    "pause_schedule": "django_procedures.scheduling",
    "resume_schedule": "django_procedures.scheduling",
    "delete_schedule": "django_procedures.scheduling",
    "register_schedule": "django_procedures.scheduling",
    "declare_schedule": "django_procedures.scheduling",
    "tick": "django_procedures.scheduling",
}

if TYPE_CHECKING:
    from django_procedures.exceptions import EventNotDelivered, NonRetryable, NoOutput
    from django_procedures.handle import ProcedureHandle, aget_handle, get_handle
    from django_procedures.policy.limits import Limit
    from django_procedures.policy.retry import RetryPolicy
    from django_procedures.policy.status import RunStatus
    from django_procedures.procedure import LockKey, Procedure, Status, step
    from django_procedures.runtime.context import Context
    from django_procedures.scheduling import (
        declare_schedule,
        delete_schedule,
        pause_schedule,
        register_schedule,
        resume_schedule,
        tick,
        trigger_schedule,
    )
    from django_procedures.sending import send_event
    from django_procedures.store.tree import ChildResult
    from django_procedures.submit_options import SubmitOptions


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'django_procedures' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(module), name)
