"""Re-running a final procedure from a step: which step a name means, and where in its history it starts.

Pure: the class's step names, its ``renamed_steps`` and what the stored run went through come in; the
position to start at (or a sentence saying why not) goes out. The store reads the rows and writes the new run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from django_procedures.policy.versions import resolve_step


class RerunRefused(ValueError):
    """A re-run that cannot be made; the message says why and what to do instead."""


@dataclass(frozen=True)
class Start:
    """Where a re-run starts: ``index`` steps are behind it and ``step_name`` (a step of the current class) is next.

    ``index`` 0 starts from the submitted state; any other from the state committed with step ``index - 1``.
    """

    index: int
    step_name: str


def target_step(from_step: str | None, step_names: Sequence[str], renamed: Mapping[str, str], type_name: str) -> str:
    """The current class's step that ``from_step`` names (itself, or an old name through ``renamed``).

    ``None`` is the first step. ``RerunRefused`` for a name that is neither.
    """
    if not step_names:
        raise RerunRefused(f"{type_name} has no steps in this code; nothing can be re-run")
    if from_step is None:
        return step_names[0]
    if not isinstance(from_step, str):
        raise TypeError(f"from_step must be a step name (a str) or None for the first step; "
                        f"got {type(from_step).__name__} {from_step!r}")
    found = resolve_step(from_step, step_names, renamed)
    if found is None:
        raise RerunRefused(f"{from_step!r} names no step of {type_name}; its steps are "
                           f"{', '.join(step_names)} (or None for the first)")
    return found


def start(target: str, step_names: Sequence[str], renamed: Mapping[str, str], reached: Iterable[tuple[int, str]],
          procedure: str) -> Start:
    """The first position at which the stored run stood at ``target``.

    ``reached`` is every ``(index, step name as stored)`` the run (and the runs it re-ran) went through: its step
    attempts and its next step. The first step always starts at 0, with the submitted state, whatever the run
    did (a state machine that ran ``execute`` many times starts from the beginning). ``RerunRefused`` when the
    run never stood at ``target``: no state was committed before it.
    """
    if target == step_names[0]:
        return Start(0, target)
    positions = sorted({index for index, name in reached if resolve_step(name, step_names, renamed) == target})
    if not positions:
        ran = [name for _, name in sorted(set(reached))]
        raise RerunRefused(f"procedure {procedure} never reached step {target!r}, so no state was committed before "
                           f"it; re-run it from a step it reached ({', '.join(dict.fromkeys(ran)) or 'none'})")
    return Start(positions[0], target)
