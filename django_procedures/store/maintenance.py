"""Periodic upkeep any worker runs every few seconds: expired leases, stranded key waiters, deadlocks."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django_procedures.store import locks, operations
from django_procedures.store.leases import sweep_expired

logger = logging.getLogger("django_procedures.worker")


@dataclass(frozen=True)
class MaintenanceReport:
    resumed: int = 0
    parked: int = 0
    woken: int = 0
    deadlocks: int = 0


def maintain() -> MaintenanceReport:
    """Recover expired leases, wake key waiters whose keys are free, and break lock key deadlocks."""
    swept = sweep_expired()
    woken = locks.wake_stranded()
    broken = 0
    for victims, message in locks.deadlocks():
        if operations.fail_waiting(victims, message):
            broken += 1
            logger.warning("%s", message)
    return MaintenanceReport(swept.resumed, swept.parked, woken, broken)
