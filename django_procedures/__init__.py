"""Durable multi-step procedures for Django.

The public names are imported lazily so that importing the package (for
example from ``settings.py`` or a pure-policy test) never touches Django's
app registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "LockKey",
    "NonRetryable",
    "Procedure",
    "ProcedureHandle",
    "RetryPolicy",
    "Status",
    "declare_schedule",
    "get_handle",
    "register_schedule",
    "step",
    "tick",
]

_LAZY = {
    "LockKey": "django_procedures.procedure",
    "Procedure": "django_procedures.procedure",
    "Status": "django_procedures.procedure",
    "step": "django_procedures.procedure",
    "RetryPolicy": "django_procedures.policy.retry",
    "NonRetryable": "django_procedures.exceptions",
    "ProcedureHandle": "django_procedures.handle",
    "get_handle": "django_procedures.handle",
    "register_schedule": "django_procedures.store.schedules",
    "declare_schedule": "django_procedures.store.schedules",
    "tick": "django_procedures.store.ticks",
}

if TYPE_CHECKING:
    from django_procedures.exceptions import NonRetryable
    from django_procedures.handle import ProcedureHandle, get_handle
    from django_procedures.policy.retry import RetryPolicy
    from django_procedures.procedure import LockKey, Procedure, Status, step
    from django_procedures.store.schedules import declare_schedule, register_schedule
    from django_procedures.store.ticks import tick


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'django_procedures' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(module), name)
