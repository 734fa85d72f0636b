"""Worker states and stop reasons, shared by the store, the runtime and the admin."""

from __future__ import annotations

from enum import StrEnum


class WorkerState(StrEnum):
    ALIVE = "alive"
    GONE = "gone"  # stopped renewing without saying so: killed -9, host lost, frozen
    STOPPED = "stopped"


class StopReason(StrEnum):
    SIGTERM = "sigterm"
    SIGINT = "sigint"
    BURST = "burst"  # --burst found nothing left to do
    ERROR = "error"
    OTHER = "other"  # Worker.stop() called by embedding code

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {StopReason.SIGTERM: "SIGTERM", StopReason.SIGINT: "SIGINT", StopReason.BURST: "drained (--burst)",
           StopReason.ERROR: "error", StopReason.OTHER: "stopped"}


def stop_reason(signal_or_reason: str) -> StopReason:
    """The reason recorded for ``Worker.stop(reason)``: the signal's name, or why it stopped."""
    return {"SIGTERM": StopReason.SIGTERM, "SIGINT": StopReason.SIGINT, "burst": StopReason.BURST,
            "error": StopReason.ERROR}.get(signal_or_reason, StopReason.OTHER)
