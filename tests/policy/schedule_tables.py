"""The tick-by-tick tables of ``docs/schedules.md``, computed by the real decision functions.

The scenarios are those of ``test_schedule_decision.py`` (a 1-minute schedule whose runs take 3.5
minutes, a scheduling pass every minute), walked by the simulator of ``schedule_sim.py``, which asserts
the slot bound, order and uniqueness as it goes. ``test_schedule_docs.py`` checks that the docs hold these tables
verbatim; ``python -m tests.policy.schedule_tables`` prints them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django_procedures.policy.schedule import Mode, ScheduleSettings, TickDecision

from .schedule_sim import MINUTE, T0, Sim, at
from .test_schedule_decision import COARSE, SCENARIOS

HEADER = ["min", "event", "what happens", "running", "pending", "skips", "overlaps"]


def minutes(times: Sequence[datetime]) -> str:
    return ", ".join(f"{(t - T0) / MINUTE:g}" for t in sorted(times)) or "\N{EN DASH}"


class TableSim(Sim):
    """The test simulator, also keeping one table row per event (a pass with due ticks, or a run ending)."""

    def __init__(self, settings: ScheduleSettings, run_minutes: float) -> None:
        super().__init__(settings, lambda _: MINUTE * run_minutes)
        self.rows: list[list[str]] = []
        self._due: list[datetime] = []
        self._event = ""

    def tick(self, now: datetime) -> TickDecision:
        self.finish_until(now)
        due, t = [], self.next_tick_at
        while t is not None and t <= now and len(due) < 100:
            due.append(t)
            t = None if self.settings.mode is Mode.FIXED_DELAY else t + self.period
        self._due, self._event = due, "pass"
        return super().tick(now)

    def finish_until(self, now: datetime) -> None:
        saved = self._due, self._event
        self._due, self._event = [], "finish"
        super().finish_until(now)
        self._due, self._event = saved

    def _record(self, label: str, start: Sequence[datetime], pending: tuple[datetime, ...], skips: int = 0,
                overlaps: int = 0, drift: timedelta = timedelta(0), next_at: datetime | None = None) -> None:
        old_pending = self.pending
        when, _, rest = label.partition(" ")
        event = f"run {rest.removeprefix('finish ')} ends" if self._event == "finish" else "pass"
        dropped = [t for t in (*old_pending, *self._due) if t not in start and t not in pending]
        kept = [t for t in pending if t not in old_pending]
        parts = []
        if self._event == "pass":
            parts.append(f"due: {minutes(self._due)}")
        if start:
            parts.append(f"start {minutes(start)}" + _overlaps(overlaps, len(start)))
        if kept:
            parts.append(f"keep {minutes(kept)} pending")
        if dropped:
            parts.append(f"skip {minutes(dropped)}")
        if next_at is not None:
            parts.append(f"next tick at {minutes([next_at])}")
        if drift:
            parts.append(f"drift {drift / MINUTE:g} min")
        super()._record(label, start, pending, skips, overlaps, drift, next_at)
        running = [t for _, t in self.running] + list(start)
        self.rows.append([when, event, "; ".join(parts) or "slot freed", minutes(running), minutes(pending),
                          str(self.skips), str(self.overlaps)])


def _overlaps(overlaps: int, started: int) -> str:
    if not overlaps:
        return ""
    if overlaps == started:
        return " (an overlap)" if started == 1 else " (overlaps)"
    return f" ({overlaps} overlap{'s' if overlaps > 1 else ''})"


def table(settings: ScheduleSettings, run_minutes: float = 3.5, passes: Sequence[float] = range(9)) -> str:
    sim = TableSim(settings, run_minutes)
    for m in passes:
        sim.tick(at(m))
    rows = [HEADER, ["---:", "---", "---", "---", "---", "---:", "---:"], *sim.rows]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def tables() -> dict[str, str]:
    """Scenario name -> Markdown table, for every scenario the docs show."""
    out = {name: table(settings) for name, (settings, _) in SCENARIOS.items()}
    out.update({f"coarse {name}": table(settings, 2, [0, 5, 10]) for name, (settings, _) in COARSE.items()})
    return out


if __name__ == "__main__":
    for name, text in tables().items():
        print(f"<!-- table: {name} -->\n{text}\n<!-- end table -->\n")
