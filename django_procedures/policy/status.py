"""The stored status strings of a procedure and which of them are final."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """A procedure's status as stored in ``ProcedureRun.status``."""

    READY = "ready"
    RUNNING = "running"
    WAITING = "waiting"
    RETRYING = "retrying"
    DONE = "done"
    FAILED = "failed"
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in FINAL


FINAL = frozenset({RunStatus.DONE, RunStatus.FAILED, RunStatus.ROLLED_BACK, RunStatus.CANCELLED})
#: Statuses a claim picks up once ``run_at`` has come.
CLAIMABLE = (RunStatus.READY, RunStatus.RETRYING)
#: Statuses that hold a lease.
LEASED = (RunStatus.RUNNING, RunStatus.ROLLING_BACK)
#: The statuses that are not final (a schedule's run holds its slot in them), listed so an index can serve them.
UNFINISHED = tuple(s for s in RunStatus if s not in FINAL)
#: The final statuses other than done, in a fixed order (the partial index of the admin's failures by type).
UNSUCCESSFUL = (RunStatus.FAILED, RunStatus.ROLLED_BACK, RunStatus.CANCELLED)


class StepStatus(StrEnum):
    """How one step attempt ended (``Step.status``)."""

    DONE = "done"
    FAILED = "failed"
    LOST = "lost"


class LeaseOutcome(StrEnum):
    """How one claim ended (``Lease.outcome``)."""

    COMPLETED = "completed"
    RETRIED = "retried"
    FAILED = "failed"
    RELEASED = "released"
    EXPIRED = "expired"
    LOST = "lost"
