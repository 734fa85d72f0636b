"""Hooks for metrics and traces: what a worker's executor and main loop tell observers (none by default: no cost).

An observer is any object with some of the methods these functions call (a
method it lacks is skipped); ``runtime.metrics.WorkerMetrics`` and
``runtime.tracing.Tracing`` are two. Observers must not raise: a failing one
is logged and the worker carries on. Every hook but :func:`claimed` runs on
the executor thread that runs the claim (:func:`step_failed` also on the
heartbeat thread, for a step past its timeout).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

from django.db import transaction

logger = logging.getLogger("django_procedures.worker")

#: Registered observers; empty unless ``procedures_worker --metrics-port``, tracing (``runtime.tracing``) or
#: embedding code adds one.
observers: list[Any] = []


def _emit(name: str, *args: Any) -> None:
    for observer in observers:
        method = getattr(observer, name, None)
        if method is None:
            continue
        try:
            method(*args)
        except Exception:  # metrics and traces must never stop a worker
            logger.exception("observer %r failed in %s", observer, name)


def claimed(claims: Sequence[Any]) -> None:
    """The main loop leased ``claims`` (``store.claim.Claim``); threads take them up later."""
    if observers:
        _emit("claimed", claims)


def claim_started(running: Any) -> None:
    """A thread took up ``running`` (``runtime.running.RunningClaim``) and runs it now."""
    if observers:
        _emit("claim_started", running)


def steps_committed(claim: Any, records: Sequence[Any]) -> None:
    """``records`` (``fence.StepRecord``) were written as ``done``: reported once their transaction commits."""
    if observers:
        transaction.on_commit(partial(_steps_done, claim, tuple(records)))  # no closure made per step


def _steps_done(claim: Any, records: tuple[Any, ...]) -> None:
    for r in records:
        _emit("step_ended", claim, r, "done", None)


def step_failed(claim: Any, record: Any, error: BaseException | None = None) -> None:
    """The attempt ``record`` failed, raising ``error``."""
    if observers and record is not None:
        _emit("step_ended", claim, record, "failed", error)


def outcome(running: Any, value: str) -> None:
    """``running``'s run ended (``Outcome`` value): finished procedures and lost leases are counted from it."""
    if observers:
        _emit("outcome", running, value)


def fenced_write(claim: Any) -> None:
    """A write refused by the fence: the lease had moved, the result was dropped."""
    if observers:
        _emit("fenced_write", claim)


def seconds(record: Any) -> float:
    """How long a step attempt (``fence.StepRecord``) ran."""
    return max(0.0, (record.finished_at - record.started_at).total_seconds())
