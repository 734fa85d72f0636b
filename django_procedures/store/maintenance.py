"""Periodic upkeep any worker runs every few seconds: expired leases, stranded key waiters and parents,
deadlocks, and runs past their schedule's ``max_run_time``."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django_procedures.store import locks, operations, overdue, timers, tree
from django_procedures.store.db import is_disconnect
from django_procedures.store.leases import SweepReport, sweep_expired

T = TypeVar("T")

logger = logging.getLogger("django_procedures.worker")


@dataclass(frozen=True)
class MaintenanceReport:
    resumed: int = 0
    parked: int = 0
    woken: int = 0
    deadlocks: int = 0
    timed_out: int = 0
    timers: int = 0


def maintain() -> MaintenanceReport:
    """Recover expired leases, wake sleepers whose time has come (a safety net: workers wake them on time), wake
    key waiters whose keys are free and parents whose children are all
    final (a worker lost between a last child's commit and its parent's wake-up), break lock key deadlocks, and cancel
    runs past their schedule's ``max_run_time`` (ticker or not).

    Each part runs even if an earlier one failed (a row the sweep cannot write
    must not stop ``max_run_time``); the first error is raised at the end, so
    the worker's chore logs it. A lost connection is raised at once.
    """
    errors: list[Exception] = []

    def part(run: Callable[[], T], default: T) -> T:
        try:
            return run()
        except Exception as error:
            if is_disconnect(error):
                raise
            errors.append(error)
            return default

    swept = part(sweep_expired, SweepReport())
    woken = part(locks.wake_stranded, 0) + part(tree.wake_stranded_parents, 0)
    timers_woken = part(timers.wake_due, 0)
    broken = part(_break_deadlocks, 0)
    none_cancelled: list[Any] = []
    timed_out = len(part(overdue.cancel_overdue, none_cancelled))
    if errors:
        raise errors[0]
    return MaintenanceReport(swept.resumed, swept.parked, woken, broken, timed_out, timers_woken)


def _break_deadlocks() -> int:
    """Fail the youngest tree of each cycle; a cycle through a tree already failed in this pass is left
    for the next pass, which sees whether it is still there (failing that tree may have ended it)."""
    broken = 0
    failed_trees: set[uuid.UUID] = set()
    for cycle in locks.deadlocks():
        if failed_trees & cycle.trees:
            continue
        if operations.fail_waiting(cycle.victims, cycle.message):
            broken += 1
            failed_trees.add(cycle.youngest)
            logger.warning("%s", cycle.message)
    return broken
