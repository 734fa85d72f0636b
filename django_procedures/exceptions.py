"""Exceptions of django-procedures."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured


class ProceduresError(Exception):
    """Base of every django-procedures error; never raised itself."""


class NonRetryable(ProceduresError):
    """Raised by a step to fail at once, without using up the retry budget.

    ``manual_retry=False`` also marks the failure as not worth a manual retry.
    """

    def __init__(self, message: str = "", *, manual_retry: bool = True) -> None:
        super().__init__(message)
        self.manual_retry = manual_retry


class ChildFailed(ProceduresError):
    """Raised by the default ``on_child_failed``: a child failed, so its parent fails too."""


class LeaseLost(ProceduresError):
    """A fenced write matched no row: another worker owns the procedure now."""


class NotActive(ProceduresError):
    """``ctx.ensure_active()``: the lease was lost, timed out, cancelled, or the worker is stopping."""


class ShuttingDown(NotActive):
    """``ctx.ensure_active()`` during a graceful shutdown."""


class UnknownProcedureType(ProceduresError, LookupError):
    """A type name that no registered ``Procedure`` class carries."""


class KeyConflict(ProceduresError, ValueError):
    """An idempotency key already names a procedure of another type; the submit created nothing."""

    def __init__(self, message: str, *, key: str, existing_id: Any, existing_type: str) -> None:
        super().__init__(message)
        self.key, self.existing_id, self.existing_type = key, existing_id, existing_type


class InvalidOperation(ProceduresError):
    """An operator operation that does not apply to the procedure's status."""


class ProceduresConfigError(ImproperlyConfigured):
    """Misconfiguration found at start-up."""


class ProceduresNotMigrated(ProceduresConfigError):
    """The database lacks django-procedures' tables: run ``manage.py migrate``."""


class NoOutput(ProceduresError, ValueError):
    """``ProcedureHandle.output`` of a procedure that is not ``done`` (still running, or failed)."""


class EventNotDelivered(ProceduresError):
    """``send_event`` refused: nothing was written.

    ``reason`` says why: ``"unknown"`` (no procedure has that id or key),
    ``"final"`` (it is done, failed, rolled back or cancelled) or ``"full"``
    (it has ``PROCEDURES["MAX_UNCONSUMED_EVENTS"]`` events no wait has taken yet).
    """

    def __init__(self, message: str, *, reason: str, procedure_id: Any = None) -> None:
        super().__init__(message)
        self.reason, self.procedure_id = reason, procedure_id
