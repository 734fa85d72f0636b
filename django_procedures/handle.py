"""``ProcedureHandle``: a caller's view of one submitted procedure."""

from __future__ import annotations

import time
import uuid
from typing import Any

from django_procedures.policy.status import FINAL


class ProcedureHandle:
    """Refers to one procedure by id; ``refresh()`` re-reads it from the database."""

    def __init__(self, procedure_id: uuid.UUID | str) -> None:
        self.id = procedure_id if isinstance(procedure_id, uuid.UUID) else uuid.UUID(str(procedure_id))
        self._row: Any = None

    def __repr__(self) -> str:
        status = self._row.status if self._row is not None else "?"
        return f"<ProcedureHandle {self.id} {status}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProcedureHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def refresh(self) -> ProcedureHandle:
        from django_procedures.models import ProcedureRun

        self._row = ProcedureRun.objects.only("id", "type_name", "status", "output", "error", "progress",
                                              "progress_updated_at").get(id=self.id)
        return self

    @property
    def run(self) -> Any:
        """The ``ProcedureRun`` as last read (read on first use)."""
        if self._row is None:
            self.refresh()
        return self._row

    @property
    def status(self) -> str:
        return self.run.status

    @property
    def output(self) -> Any:
        return self.run.output

    @property
    def error(self) -> str:
        return self.run.error

    @property
    def type_name(self) -> str:
        return self.run.type_name

    @property
    def progress(self) -> dict[str, Any] | None:
        """The last ``ctx.progress()`` written, as last read: ``{"done", "total", "note", "updated_at"}``, or None.

        Call ``refresh()`` to read it again while the procedure runs.
        """
        row = self.run
        if row.progress is None:
            return None
        return {"done": row.progress.get("done"), "total": row.progress.get("total"),
                "note": row.progress.get("note", ""), "updated_at": row.progress_updated_at}

    def wait(self, timeout: float | None = None, *, poll: float = 0.05) -> str:
        """Block until the procedure is final and return its status; ``TimeoutError`` after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = poll
        while True:
            if self.refresh().status in FINAL:
                return self.status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"procedure {self.id} is still {self.status} after {timeout} seconds")
            time.sleep(delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic())))
            delay = min(delay * 1.5, 1.0)

    def cancel(self, *, by: str = "") -> Any:
        """Cancel this procedure and its unfinished subtree; returns a ``CancelResult`` saying what changed."""
        from django_procedures.store import operations

        self._row = None
        return operations.cancel(self.id, by=by)

    def retry(self, *, by: str = "") -> None:
        """Retry a failed procedure from its last checkpoint (see ``store.operations.retry``).

        A child is retried only while its parent waits for it, and a scheduled run only into a free slot;
        otherwise ``InvalidOperation`` says why and what to do instead.
        """
        from django_procedures.store import operations

        operations.retry(self.id, by=by)
        self._row = None


def get_handle(procedure_id: uuid.UUID | str) -> ProcedureHandle:
    """A handle for an existing procedure; ``LookupError`` if there is none."""
    from django_procedures.models import ProcedureRun

    handle = ProcedureHandle(procedure_id)
    if not ProcedureRun.objects.filter(id=handle.id).exists():
        raise LookupError(f"no procedure has the id {procedure_id}")
    return handle
