"""Periodic upkeep any worker runs every few seconds: expired leases, stranded key waiters, deadlocks, and
runs past their schedule's ``max_run_time``."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django_procedures.store import locks, operations, overdue
from django_procedures.store.leases import sweep_expired

logger = logging.getLogger("django_procedures.worker")


@dataclass(frozen=True)
class MaintenanceReport:
    resumed: int = 0
    parked: int = 0
    woken: int = 0
    deadlocks: int = 0
    timed_out: int = 0


def maintain() -> MaintenanceReport:
    """Recover expired leases, wake key waiters whose keys are free, break lock key deadlocks, and cancel
    runs past their schedule's ``max_run_time`` (ticker or not)."""
    swept = sweep_expired()
    woken = locks.wake_stranded()
    broken = 0
    for victims, message in locks.deadlocks():
        if operations.fail_waiting(victims, message):
            broken += 1
            logger.warning("%s", message)
    timed_out = len(overdue.cancel_overdue())
    return MaintenanceReport(swept.resumed, swept.parked, woken, broken, timed_out)
