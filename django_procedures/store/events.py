"""Sending transition signals once the transaction that made the transition commits."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.dispatch import Signal

logger = logging.getLogger("django_procedures.signals")


def send_after_commit(signal: Signal, **kwargs: Any) -> None:
    """Send ``signal`` after commit; a failing receiver is logged, never raised into the worker."""
    from django_procedures.models import ProcedureRun

    if not signal.has_listeners(ProcedureRun):  # the common case on the hot path: nothing to schedule
        return

    def send() -> None:
        for receiver, result in signal.send_robust(sender=ProcedureRun, **kwargs):
            if isinstance(result, Exception):
                logger.error("signal receiver %r failed", receiver, exc_info=result,
                             extra={"procedure_id": str(kwargs.get("procedure_id"))})

    transaction.on_commit(send)
