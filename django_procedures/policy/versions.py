"""Procedure versions: what a class may declare, which step a stored run resumes at, and which step lists changed.

Pure: the class attributes, the stored positions and the step names come in, decisions and sentences go out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: ``ProcedureRun.version``'s column (PostgreSQL's ``integer``): a larger version could not be stored.
MAX_VERSION = 2**31 - 1


def check_version(version: Any, where: str) -> int:
    """``version`` if it is an int from 1 to :data:`MAX_VERSION`; else a ``ValueError`` saying what to write."""
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        raise ValueError(f"{where}.version must be an int from 1 to {MAX_VERSION} (raise it by one when the steps "
                         f"or the state's shape change); got {version!r}")
    return version


def check_renamed_steps(renamed: Any, step_names: Sequence[str], where: str) -> dict[str, str]:
    """``renamed`` as a plain ``{"old": "new"}`` dict whose every target is a step of the class, the old names
    none; else a ``ValueError``."""
    if not isinstance(renamed, Mapping) or not all(
            isinstance(old, str) and isinstance(new, str) for old, new in renamed.items()):
        raise ValueError(f"{where}.renamed_steps must be a dict of step names, {{'old_name': 'new_name'}}; "
                         f"got {renamed!r}")
    for old, new in renamed.items():
        if new not in step_names:
            raise ValueError(f"{where}.renamed_steps maps {old!r} to {new!r}, which is not a step of {where} "
                             f"(its steps: {', '.join(step_names) or 'none'}); name an existing step")
        if old in step_names:
            raise ValueError(f"{where}.renamed_steps maps {old!r}, which is still a step of {where}; a step that "
                             "exists is never looked up by its old name: drop the entry, or rename the method")
    return dict(renamed)


def resolve_step(name: str, step_names: Sequence[str], renamed: Mapping[str, str]) -> str | None:
    """The step a run stored at ``name`` resumes at: itself, or what ``renamed`` maps it to; None if neither."""
    if name in step_names:
        return name
    new = renamed.get(name)
    return new if new in step_names else None


def missing_step_text(step_name: str, type_name: str, run_version: int, class_version: int) -> str:
    """The error of a run whose next step the class no longer has."""
    return (f"step {step_name!r} no longer exists in {type_name} (the run was written by version {run_version}; "
            f"this worker's class is version {class_version}): restore the step, or map it in renamed_steps "
            "= {" f"{step_name!r}: 'new_name'" "}, deploy, and retry the procedure")


@dataclass(frozen=True)
class Position:
    """Where stored runs that are not final stand: their type, version, committed step count and next step."""

    type_name: str
    version: int
    step: int
    step_name: str


def changed_without_version(step_names: Sequence[str], version: int, positions: Iterable[Position],
                            renamed: Mapping[str, str] | None = None) -> list[Position]:
    """Positions of runs written by this very ``version`` that the class's step list no longer matches.

    With ``@step`` methods a run's committed step count is the position of its next step (``""`` after the
    last), so a step added before it, removed, or moved, shows. Runs of other versions are left out: older
    ones are upgraded (``renamed_steps``, ``upgrade_state``), newer ones belong to newer workers.
    """
    expected = [*step_names, ""]
    return [p for p in positions if p.version == version and (
        p.step >= len(expected) or expected[p.step] != (renamed or {}).get(p.step_name, p.step_name))]
