"""Where the tree timeline draws things: segments of each member's life, placed on one time axis.

Pure: no Django, no database. :mod:`django_procedures.admin.tree_timeline` feeds it the
rows it read and renders what it returns as SVG.

A member's life is a sequence of segments. Its step attempts (``done``, ``failed``,
``lost``, or ``running`` now) are bars; between them the gaps are drawn thin, by kind:

- ``queued``: from creation to the first attempt, or after a release, until a worker claimed it;
- ``retry``: after a failed or lost attempt, until the next attempt started (backoff and pickup);
- ``manual``: failed for good, until an operator's manual retry (then ``queued`` until it was claimed);
  only the latest manual retry is recorded (``retried_at``), so earlier ones are drawn as ``retry``;
- ``waiting``: a parent that spawned children, from its suspending step to its next attempt;
- ``sleep`` and ``event``: a procedure sleeping (``Status.sleep``) or waiting for an event
  (``Status.wait_for_event``) now, from its last attempt to now. (A wait that has ended is not
  recorded as such: the gap after it is drawn ``queued``.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

#: Segment kinds that are attempts (bars) rather than gaps.
ATTEMPT_KINDS = frozenset({"done", "failed", "lost", "running"})
GAP_KINDS = frozenset({"queued", "retry", "manual", "waiting", "sleep", "event"})
#: A bar never narrower than this (px), so a 3 ms step is still visible and clickable.
MIN_BAR = 3.0


@dataclass(frozen=True)
class Attempt:
    """One step attempt: ended (``done``, ``failed``, ``lost``) or in flight (``running``, ``end`` None)."""

    index: int
    name: str
    attempt: int
    status: str
    start: datetime
    end: datetime | None
    error: str = ""


@dataclass(frozen=True)
class Member:
    """One procedure of the tree, with what the timeline needs to know about it."""

    key: str
    label: str
    depth: int
    status: str
    created_at: datetime
    attempts: tuple[Attempt, ...] = ()
    has_children: bool = False
    finished_at: datetime | None = None
    current: bool = False
    retried_at: datetime | None = None  # the latest manual retry
    waiting_for: str = ""  # a waiting member's one wait: "children", "timer" or "event"


@dataclass(frozen=True)
class Segment:
    kind: str  # an attempt status (ATTEMPT_KINDS) or a gap kind (GAP_KINDS)
    start: datetime
    end: datetime
    attempt: Attempt | None = None


@dataclass(frozen=True)
class Placed:
    segment: Segment
    x: float
    width: float


@dataclass
class Lane:
    member: Member
    placed: list[Placed] = field(default_factory=list)


@dataclass(frozen=True)
class Axis:
    """Maps times in ``[start, end]`` to x in ``[x0, x0 + width]``."""

    start: datetime
    end: datetime
    x0: float
    width: float

    @property
    def seconds(self) -> float:
        return max((self.end - self.start).total_seconds(), 1e-3)

    def x(self, moment: datetime) -> float:
        share = (moment - self.start).total_seconds() / self.seconds
        return self.x0 + min(1.0, max(0.0, share)) * self.width

    def place(self, start: datetime, end: datetime, min_width: float = 0.0) -> tuple[float, float]:
        """``(x, width)`` of the span, at least ``min_width`` wide and never past the axis's right end."""
        left, right = self.x(start), self.x(end)
        width = max(right - left, min_width)
        left = min(left, self.x0 + self.width - width)
        return round(left, 2), round(width, 2)


def segments(member: Member, now: datetime) -> list[Segment]:
    """The member's life in time order: attempts as bars, and the gaps before, between and after them."""
    out: list[Segment] = []
    attempts = sorted(member.attempts, key=lambda a: (a.start, a.index, a.attempt))
    cursor, previous = member.created_at, None
    for attempt in attempts:
        end = attempt.end or now
        if attempt.start > cursor:
            out.extend(_gap(previous, member, cursor, attempt.start))
        kind = attempt.status if attempt.end is not None else "running"
        out.append(Segment(kind, attempt.start, max(end, attempt.start), attempt))
        cursor, previous = max(cursor, end), attempt
    tail_end = member.finished_at or (None if member.status in _FINAL else now)
    tail = _tail_kind(member, previous)
    if tail is not None and tail_end is not None and tail_end > cursor:
        # Ready again after failing for good: retried by an operator, not yet claimed.
        out.extend(_gap(previous, member, cursor, tail_end) if member.status == "ready" else
                   [Segment(tail, cursor, tail_end)])
    return out


_FINAL = frozenset({"done", "failed", "rolled_back", "cancelled"})


def _gap(previous: Attempt | None, member: Member, start: datetime, end: datetime) -> list[Segment]:
    """The gap before an attempt; split where an operator retried a procedure that had failed for good."""
    retried = member.retried_at
    if previous is not None and previous.status == "failed" and retried is not None and start <= retried <= end:
        return [Segment(kind, a, b) for kind, a, b in (("manual", start, retried), ("queued", retried, end))
                if b > a]
    return [Segment(_gap_after(previous, member), start, end)]


def _gap_after(previous: Attempt | None, member: Member) -> str:
    if previous is None:
        return "queued"
    if previous.status in ("failed", "lost"):
        return "retry"
    return "waiting" if member.has_children else "queued"


def _tail_kind(member: Member, previous: Attempt | None) -> str | None:
    """What the member is doing after its last attempt, up to now (None: nothing to draw)."""
    if member.status == "waiting":
        return {"timer": "sleep", "event": "event"}.get(member.waiting_for, "waiting")
    if member.status == "retrying":
        return "retry"
    if member.status == "ready":
        return _gap_after(previous, member) if previous is not None else "queued"
    return None


def time_range(members: Sequence[Member], now: datetime) -> tuple[datetime, datetime]:
    """From the earliest creation to the latest end (``now`` while any member is unfinished)."""
    if not members:
        return now - timedelta(seconds=1), now
    start = min(m.created_at for m in members)
    ends = [m.finished_at or now if m.status in _FINAL else now for m in members]
    ends += [a.end or now for m in members for a in m.attempts]
    end = max(ends)
    if end <= start:
        end = start + timedelta(seconds=1)
    return start, end


def lay_out(members: Sequence[Member], now: datetime, x0: float, width: float) -> tuple[Axis, list[Lane]]:
    """One lane per member, in the given order, each segment placed on a shared axis."""
    start, end = time_range(members, now)
    axis = Axis(start, end, x0, width)
    lanes = []
    for member in members:
        lane = Lane(member)
        for segment in segments(member, now):
            minimum = MIN_BAR if segment.kind in ATTEMPT_KINDS else 0.0
            x, w = axis.place(segment.start, segment.end, minimum)
            if w > 0:
                lane.placed.append(Placed(segment, x, w))
        lanes.append(lane)
    return axis, lanes


#: Tick spacings the axis chooses from, in seconds.
_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
          3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)


def ticks(axis: Axis, most: int = 8) -> list[tuple[float, float]]:
    """``(x, seconds since the axis start)`` for round spacings, at most ``most`` of them, the first at 0."""
    total = axis.seconds
    spacing = next((s for s in _STEPS if total / s <= most), total)
    out: list[tuple[float, float]] = []
    n = 0
    while n * spacing <= total + 1e-9 and len(out) <= most:
        offset = n * spacing
        out.append((round(axis.x0 + offset / total * axis.width, 2), offset))
        n += 1
    return out
