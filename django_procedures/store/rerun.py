"""Re-running final procedures from a step: a new run of the same type from a committed checkpoint.

The new run (``rerun_of`` = the original) starts at the step asked for with the state committed just before
it: the submitted state for the first step, else the state the step before it committed. It keeps the
original's queue, priority, lock keys and version (a worker upgrades an older state through
``upgrade_state`` before its first step, as for any older run); it takes no idempotency key (the key keeps
naming the original), no parent and no schedule. The original is not changed. See
docs/changing-procedures.md, "Re-running from a step".
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from django_procedures import clock, registry, signals
from django_procedures.exceptions import UnknownProcedureType
from django_procedures.models import ProcedureRun, Step
from django_procedures.policy.ids import new_id
from django_procedures.policy.rerun import RerunRefused, Start, start, target_step
from django_procedures.policy.status import FINAL, StepStatus
from django_procedures.store.events import send_after_commit
from django_procedures.store.notify import notify
from django_procedures.store.schema import tables_required

logger = logging.getLogger("django_procedures.rerun")

#: How many re-runs of re-runs are followed back to find a state committed before the latest one started.
CHAIN_MAX = 100

_COPIED = ("type_name", "queue", "priority", "lock_keys")


@dataclass(frozen=True)
class RerunResult:
    """One procedure asked to be re-run: the new run's id, or why there is none (``refusal``)."""

    original: Any
    rerun: uuid.UUID | None = None
    refusal: str = ""

    @property
    def ok(self) -> bool:
        return self.rerun is not None


def step_names(type_name: str) -> list[str]:
    """The steps a run of ``type_name`` can be re-run from (the registered class's, in order); ``[]`` if unknown."""
    try:
        return [s.name for s in registry.get(type_name).steps]
    except UnknownProcedureType:
        return []


def rerun(procedure_id: Any, from_step: str | None = None, *, by: str = "") -> uuid.UUID:
    """Start a new run of the final procedure ``procedure_id`` from ``from_step`` (None: the first step); its id.

    ``from_step`` may be an old name mapped by the class's ``renamed_steps``. ``RerunRefused`` (a
    ``ValueError``) and nothing written: an unknown id, a procedure that is not final, a type no class is
    registered for, a class of a lower version than the run's (a downgrade), a step the type does not have,
    or one the run never reached (or reached without a checkpoint before it: steps returning
    ``Status.executing(persist=False)`` commit together).
    """
    with tables_required(), transaction.atomic():
        # Locked so that a retry or a prune committing meanwhile cannot make the history read below stale.
        row = ProcedureRun._writer.select_for_update().filter(id=procedure_id).only(
            "id", "status", "version", "step", "step_name", "rerun_of_id", "submitted_state", *_COPIED).first()
        if row is None:
            raise RerunRefused(f"procedure {procedure_id} does not exist (it may have been pruned)")
        if row.status not in FINAL:
            raise RerunRefused(f"procedure {row.id} is {row.status}: only a final procedure (done, failed, rolled "
                               "back or cancelled) can be re-run; cancel it first, or wait for it to finish")
        try:
            cls = registry.get(row.type_name)
        except UnknownProcedureType as error:
            raise RerunRefused(f"procedure {row.id} cannot be re-run here: {error}") from None
        if row.version > cls.version:
            raise RerunRefused(f"procedure {row.id} was written by version {row.version} of {row.type_name}, newer "
                               f"than version {cls.version} in this code: a re-run here would be left to workers of "
                               f"version {row.version}; re-run it from code of that version (or later)")
        names = [s.name for s in cls.steps]
        renamed = dict(cls.renamed_steps)
        target = target_step(from_step, names, renamed, row.type_name)
        chain = _chain(row)
        at = start(target, names, renamed, _reached(chain), str(row.id))
        state, version = _state_before(at, chain, from_step or target)
        now = clock.now()
        new = ProcedureRun(id=new_id(), **{name: getattr(row, name) for name in _COPIED}, version=version,
                           state=state, submitted_state=row.submitted_state, step=at.index, step_name=at.step_name,
                           run_at=now, created_at=now, rerun_of_id=row.id)
        ProcedureRun._writer.bulk_create([new])
        notify({new.queue})
        send_after_commit(signals.procedure_submitted, procedure_id=new.id, type_name=new.type_name)
    logger.info("procedure %s re-run from step %r as %s%s", row.id, at.step_name, new.id, f" by {by}" if by else "",
                extra={"procedure_id": str(new.id), "rerun_of": str(row.id), "type_name": row.type_name,
                       "by": by})
    return new.id


def rerun_many(ids: Iterable[Any], from_step: str | None = None, *, by: str = "") -> list[RerunResult]:
    """:func:`rerun` each of ``ids``, one transaction each; a refusal is reported in its result, not raised."""
    results = []
    for pid in ids:
        try:
            results.append(RerunResult(pid, rerun(pid, from_step, by=by)))
        except (RerunRefused, TypeError) as error:
            results.append(RerunResult(pid, refusal=str(error)))
    return results


def _chain(row: ProcedureRun) -> list[ProcedureRun]:
    """``row``, then the run it re-ran, and so on: a re-run's history before its start is its original's."""
    chain = [row]
    while chain[-1].rerun_of_id is not None and len(chain) < CHAIN_MAX:
        found = ProcedureRun._writer.filter(id=chain[-1].rerun_of_id).only(
            "id", "version", "step", "step_name", "rerun_of_id", "status").first()
        if found is None:
            break  # pruned: the re-run's own history is all there is
        chain.append(found)
    return chain


def _reached(chain: list[ProcedureRun]) -> list[tuple[int, str]]:
    """Every (index, step name) the runs of ``chain`` stood at: their step attempts, and where they stopped."""
    ids = [run.id for run in chain]
    reached = list(Step._writer.filter(procedure_id__in=ids).values_list("index", "name").distinct())
    return reached + [(run.step, run.step_name) for run in chain if run.step_name]


def _state_before(at: Start, chain: list[ProcedureRun], asked: str) -> tuple[dict[str, Any], int]:
    """The state committed before position ``at`` and the version of the run that holds it."""
    head = chain[0]
    if at.index == 0:
        if head.submitted_state is None:
            raise RerunRefused(f"procedure {head.id} kept no submitted state (it was stored before re-runs were "
                               "possible); re-run it from a later step")
        return dict(head.submitted_state), head.version
    for run in chain:
        found = Step._writer.filter(procedure_id=run.id, index=at.index - 1, status=StepStatus.DONE).values_list(
            "state", flat=True).first()
        if found is not None:
            return dict(found), run.version
        if Step._writer.filter(procedure_id=run.id, index=at.index - 1, status=StepStatus.DONE).exists():
            raise RerunRefused(f"procedure {head.id} committed no checkpoint before step {asked!r}: it ran together "
                               "with the step before it (Status.executing(persist=False)); re-run it from an "
                               "earlier step")
    raise RerunRefused(f"the checkpoint before step {asked!r} of procedure {head.id} is gone (its steps were "
                       "pruned); re-run it from the first step")
