"""Hooks for metrics: what a worker's executor and main loop tell observers (none by default: no cost).

An observer is any object with the methods these functions call; ``runtime.metrics.WorkerMetrics`` is one.
Observers must not raise: a failing one is logged and the worker carries on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.db import transaction

logger = logging.getLogger("django_procedures.worker")

#: Registered observers; empty unless ``procedures_worker --metrics-port`` (or embedding code) adds one.
observers: list[Any] = []


def _emit(name: str, *args: Any) -> None:
    for observer in observers:
        try:
            getattr(observer, name)(*args)
        except Exception:  # metrics must never stop a worker
            logger.exception("metrics observer %r failed in %s", observer, name)


def claimed(claims: Sequence[Any]) -> None:
    if observers:
        _emit("claimed", claims)


def steps_committed(type_name: str, records: Sequence[Any]) -> None:
    """``records`` (``transitions.StepRecord``) were written as ``done``: counted once their transaction commits."""
    if observers:
        ended = [(type_name, "done", _seconds(r)) for r in records]

        def emit() -> None:
            for args in ended:
                _emit("step_ended", *args)

        transaction.on_commit(emit)


def step_failed(type_name: str, record: Any) -> None:
    if observers and record is not None:
        _emit("step_ended", type_name, "failed", _seconds(record))


def outcome(type_name: str, value: str) -> None:
    """A claim's run ended (``Outcome`` value): finished procedures and lost leases are counted from it."""
    if observers:
        _emit("outcome", type_name, value)


def fenced_write(type_name: str) -> None:
    """A write refused by the fence: the lease had moved, the result was dropped."""
    if observers:
        _emit("fenced_write", type_name)


def _seconds(record: Any) -> float:
    return max(0.0, (record.finished_at - record.started_at).total_seconds())
