"""The one path by which a procedure reaches a final status: ``done``, ``failed``, ``rolled_back``, ``cancelled``.

Every final transition -- a last step completing it, a permanent failure or
exhausted retries, a rollback done or failed, a run parked inside a
non-idempotent step, a cancel, a deadlock victim failed before it started --
goes through :func:`finalise`, which does, in one transaction:

1. lock what the transition will update, in the lock order: the run's
   schedule row, then its parent row (ancestors before descendants) -- the
   parent's only when the run fails: a run ending ``done`` wakes its parent
   only if it is the last child, without waiting for the parent's row
   (:func:`django_procedures.store.tree.child_finished`);
2. the transition's own ``write``: the fenced update of the run, its ``Step``
   row, its lease closed; it reports whether the run was still where the
   transition expected it (if not, nothing else happens);
3. the finish hooks: release the run's lock keys, wake its parent (a failed
   child, or the last one), complete its schedule run (free the slot, start a
   pending tick);
4. the transition's signal, sent after commit.

Because the schedule (and a failing run's parent) is locked before it is
read, two runs finishing at once (a run and a "trigger now", failing
siblings) are applied one after the other and neither update is lost.
Siblings ending ``done`` together do not queue on their parent's row.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.dispatch import Signal

from django_procedures.models import Schedule
from django_procedures.store import locks, tree
from django_procedures.store.events import send_after_commit

if TYPE_CHECKING:
    from django_procedures.store.claim import Claim


@contextmanager
def joined(alone: bool = False) -> Iterator[None]:
    """Join the caller's transaction (an atomic step's, or a test's) or open one.

    Joining without a savepoint is safe because a ``LeaseLost`` raised here comes
    from an UPDATE that matched nothing: the transaction is still usable.

    ``alone``: the caller sends exactly one statement inside and nothing else
    (``db.sole_statement``'s contract). Outside any transaction on PostgreSQL
    that statement then runs in Django's autocommit, with no ``atomic()`` at
    all: it is its own transaction, and ``on_commit`` callbacks registered after
    it run at once, when it has committed. ``atomic()`` around it would send
    nothing more, yet cost the worker about a tenth of its CPU per no-op
    procedure (entering and leaving it, four autocommit switches).
    """
    connection = transaction.get_connection()
    if connection.in_atomic_block or (alone and connection.vendor == "postgresql" and connection.get_autocommit()):
        yield
    else:
        with transaction.atomic():
            yield


@dataclass(frozen=True)
class Ending:
    """A run about to reach a final status, as the finish hooks need it (all fixed at submit)."""

    id: uuid.UUID
    type_name: str
    parent_id: uuid.UUID | None = None
    spawned_in: int = 0
    schedule_id: int | None = None
    #: False when the run was submitted without lock keys: saves the key lookup on the hot path.
    has_keys: bool = True

    @property
    def hooks_write(self) -> bool:
        """Whether the finish hooks of this run ending ``done`` write anything (see :func:`_finish_hooks`)."""
        return self.has_keys or (self.parent_id is not None and self.spawned_in > 0) or self.schedule_id is not None

    @classmethod
    def of(cls, claim: Claim) -> Ending:
        return cls(claim.id, claim.type_name, claim.parent_id, claim.spawned_in, claim.schedule_id,
                   bool(claim.lock_keys))


def lock_for_final(runs: Sequence[Ending], *, failed: bool = True) -> None:
    """Lock what the final transitions of ``runs`` update, in the lock order: schedules, then parents.

    A run that ends ``done`` (not ``failed``) leaves its parent's row alone
    unless it is the last child (:func:`django_procedures.store.tree.child_finished`).
    """
    schedules = sorted({r.schedule_id for r in runs if r.schedule_id is not None})
    if schedules:
        list(Schedule._writer.select_for_update().filter(id__in=schedules).order_by("id")
             .values_list("id", flat=True))
    if failed:
        tree.lock_rows([r.parent_id for r in runs])


def finalise(runs: Sequence[Ending], write: Callable[[Ending], bool], *, failed: bool,
             signal: Signal | None = None, alone: bool = False, **signal_kwargs: Any) -> list[Ending]:
    """Take ``runs`` to a final status through ``write``; returns the runs it ended.

    ``write(run)`` makes the transition's own writes (the run's row first) and
    returns False when the run was no longer where the transition expected it
    (its lease moved, it finished meanwhile): that run is left alone. ``failed``
    says how the parent and the schedule count it. Joins the caller's
    transaction if there is one; ``alone`` as for :func:`joined` (one run whose finish hooks write nothing, and
    whose ``write`` sends one statement).
    """
    ended = []
    with joined(alone and len(runs) == 1 and not runs[0].hooks_write):
        lock_for_final(runs, failed=failed)
        for run in runs:
            if not write(run):
                continue
            _finish_hooks(run, failed=failed)
            ended.append(run)
    if signal is not None:
        for run in ended:
            send_after_commit(signal, procedure_id=run.id, type_name=run.type_name, **signal_kwargs)
    return ended


def finish_one(run: Ending, write: Callable[[], bool], *, failed: bool, signal: Signal | None = None,
               alone: bool = False, **signal_kwargs: Any) -> bool:
    """:func:`finalise` for one run; True if it ended."""
    return bool(finalise([run], lambda _: write(), failed=failed, signal=signal, alone=alone, **signal_kwargs))


def _finish_hooks(run: Ending, *, failed: bool) -> None:
    """Release the run's lock keys, wake its parent if due, complete its schedule run (rows locked by
    :func:`lock_for_final`). :attr:`Ending.hooks_write` says when this writes: keep the two in step (a completion
    sent alone in autocommit relies on it, ``transitions.complete``)."""
    from django_procedures.store import schedules

    if run.has_keys:
        locks.release([run.id])
    tree.child_finished(run.id, run.parent_id, run.spawned_in, failed=failed)
    if run.schedule_id is not None:
        schedules.run_finished(run.schedule_id, run.id, failed=failed)
