"""The procedure page's tree timeline: every member's step attempts on one time axis, as SVG.

Reads the tree :func:`~django_procedures.admin.reads.load_tree` already loaded (capped),
plus one query for the step attempts of the members drawn (capped per member); the
layout is :mod:`~django_procedures.admin.timeline_layout`'s, tested without a database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.urls import reverse
from django.utils import timezone

import django_procedures.admin.svg as svg
from django_procedures.admin.display import elapsed
from django_procedures.admin.reads import Node, Tree
from django_procedures.admin.timeline_layout import ATTEMPT_KINDS, Attempt, Lane, Member, lay_out, ticks
from django_procedures.admin.why import duration
from django_procedures.models import ProcedureRun, Step
from django_procedures.policy.ids import short_id

#: Most members drawn; the rest are counted and linked to the list.
LANE_LIMIT = 60
#: Most attempts drawn per member (its latest ones).
ATTEMPTS_PER_MEMBER = 40
#: Members a hidden count counts up to (a capped count: a huge tree costs no more).
COUNT_CAP = 10_000

LABEL_WIDTH, CHART_WIDTH, LANE_HEIGHT, AXIS_HEIGHT, LEGEND_HEIGHT = 250, 830, 20, 22, 26
COLOURS = {"done": "#1a7f37", "failed": "#cf222e", "lost": "#9a6700", "running": "#1f6feb",
           "queued": "#8c959f", "retry": "#bf8700", "manual": "#ff8182", "waiting": "#8250df",
           "sleep": "#0a7d8c", "event": "#bc4c00"}
GAP_WORDS = {"queued": "queued, not claimed yet", "retry": "waiting to retry",
             "manual": "failed, awaiting a manual retry", "waiting": "waiting for its children",
             "sleep": "sleeping", "event": "waiting for an event"}
#: The legend's words for each kind, in its order.
LEGEND = {"done": "done", "failed": "failed", "lost": "lost", "running": "running", "queued": "queued",
          "retry": "retry wait", "manual": "failed, awaiting a manual retry", "waiting": "waiting for children",
          "sleep": "sleep", "event": "event wait"}


@dataclass
class TreeTimeline:
    svg: str
    lanes: list[Lane]
    hidden: int  # members of the tree not drawn (at least; capped at COUNT_CAP)
    hidden_capped: bool
    root_id: Any


def tree_order(tree: Tree, current_id: Any) -> list[Node]:
    """Members depth-first (as the tree list shows them), capped at ``LANE_LIMIT``, ``current_id`` always in."""
    order: list[Node] = []
    if tree.root is not None:
        stack = [tree.root]
        while stack:
            node = stack.pop(0)
            order.append(node)
            stack[:0] = node.children
    current = tree.nodes.get(current_id)
    if current is not None and current not in order:
        order.append(current)
    if len(order) > LANE_LIMIT:
        kept = order[:LANE_LIMIT]
        if current is not None and current not in kept:
            kept[-1] = current
        order = kept
    return order


def attempts_of(ids: list[Any], per_member: int = ATTEMPTS_PER_MEMBER) -> dict[Any, list[Attempt]]:
    """Each procedure's latest ``per_member`` ended step attempts (one query, read from the step index)."""
    if not ids:
        return {}
    rows = (Step.objects.filter(procedure_id__in=ids)
            .annotate(latest=Window(RowNumber(), partition_by=[F("procedure_id")],
                                    order_by=[F("index").desc(), F("attempt").desc(), F("id").desc()]))
            .filter(latest__lte=per_member)
            .values_list("procedure_id", "index", "name", "attempt", "status", "started_at", "finished_at", "error"))
    found: dict[Any, list[Attempt]] = {}
    for pid, index, name, attempt, status, started, finished, error in rows:
        found.setdefault(pid, []).append(Attempt(index, name, attempt, status, started or finished, finished,
                                                 (error or "").split("\n", 1)[0][:200]))
    return found


def member_of(node: Node, attempts: list[Attempt], current_id: Any) -> Member:
    row = node.row
    attempts = list(attempts)
    if row.status in ("running", "rolling_back") and row.step_started_at is not None:
        name = "rollback" if row.in_rollback else row.step_name
        attempts.append(Attempt(row.step, name, row.attempt, "running", row.step_started_at, None))
    return Member(key=str(row.id), label=f"{row.type_name} {short_id(row.id)}", depth=row.depth, status=row.status,
                  created_at=row.created_at, attempts=tuple(attempts), has_children=bool(node.children),
                  finished_at=row.finished_at, current=row.id == current_id, retried_at=row.retried_at,
                  waiting_for=row.waiting_for if row.status == "waiting" else "")


def hidden_members(tree: Tree, drawn: int, root_id: Any) -> tuple[int, bool]:
    """How many members are not drawn: from the loaded tree, or a capped count when it was cut."""
    if not tree.truncated:
        return len(tree.nodes) - drawn, False
    ids = ProcedureRun.objects.filter(root_id=root_id).order_by().values("id")[:COUNT_CAP]
    total = ProcedureRun.objects.filter(id__in=ids).count() + 1  # its members, and the root
    return max(0, total - drawn), total > COUNT_CAP


def tree_timeline(tree: Tree, current_id: Any, now: datetime) -> TreeTimeline | None:
    """The picture of ``tree``; None when nothing in it has started a step yet (nothing to draw but waiting)."""
    nodes = tree_order(tree, current_id)
    if not nodes:
        return None
    found = attempts_of([n.row.id for n in nodes])
    members = [member_of(n, found.get(n.row.id, []), current_id) for n in nodes]
    if not any(m.attempts for m in members):
        return None
    axis, lanes = lay_out(members, now, LABEL_WIDTH, CHART_WIDTH - 10)
    root_id = tree.root.row.id if tree.root is not None else current_id
    hidden, capped = hidden_members(tree, len(lanes), root_id)
    return TreeTimeline(render(axis, lanes, now), lanes, hidden, capped, root_id)


def round_span(seconds: float) -> str:
    """A tick's offset: ``"5s"`` rather than ``"5.0s"`` where it is whole."""
    return duration(seconds) if seconds >= 1 and float(seconds).is_integer() else elapsed(seconds)


def status_words(status: str) -> str:
    """As the status filter and chips say it: ``rolling back``, not ``rolling_back``."""
    return status.replace("_", " ")


def href(member: Member) -> str:
    return reverse("admin:django_procedures_procedurerun_change", args=[member.key])


def _clock(moment: datetime) -> str:
    local = timezone.localtime(moment)
    return local.strftime("%H:%M:%S.") + f"{local.microsecond // 1000:03d}"


def describe(member: Member, kind: str, start: datetime, end: datetime, attempt: Attempt | None) -> str:
    """The words for one segment: its tooltip, and its line in the text version."""
    took = elapsed((end - start).total_seconds())
    if attempt is None:
        return f"{member.label} · {GAP_WORDS[kind]} · {took} from {_clock(start)}"
    state = "running now" if kind == "running" else kind
    words = (f"{member.label} · step {attempt.index} {attempt.name} · attempt {attempt.attempt} · {state} · "
             f"{took} from {_clock(start)}")
    return f"{words} · {attempt.error}" if attempt.error else words


def render(axis: Any, lanes: list[Lane], now: datetime) -> str:
    height = AXIS_HEIGHT + LANE_HEIGHT * len(lanes) + LEGEND_HEIGHT
    parts = []
    for x, offset in ticks(axis):
        parts.append(svg.empty("line", x1=x, x2=x, y1=AXIS_HEIGHT - 4, y2=height - LEGEND_HEIGHT, class_="tl-grid"))
        parts.append(svg.tag("text", svg.text("+" + round_span(offset) if offset else _clock(axis.start)), x=x,
                             y=AXIS_HEIGHT - 8, class_="tl-tick"))
    for row, lane in enumerate(lanes):
        member, y = lane.member, AXIS_HEIGHT + row * LANE_HEIGHT
        link = href(member)
        if member.current:
            parts.append(svg.empty("rect", x=0, y=y, width=axis.x0 + axis.width + 8, height=LANE_HEIGHT,
                                   class_="tl-current-lane"))
        label = svg.tag("text", svg.text(member.label), x=4 + 10 * min(member.depth, 8), y=y + 14,
                        class_="tl-label tl-current" if member.current else "tl-label")
        parts.append(svg.tag("a", svg.title(f"{member.label} ({status_words(member.status)})"), label, href=link))
        for placed in lane.placed:
            seg = placed.segment
            words = describe(member, seg.kind, seg.start, seg.end, seg.attempt)
            if seg.kind in ATTEMPT_KINDS:
                bar = svg.tag("rect", svg.title(words), x=placed.x, y=y + 3, width=placed.width,
                              height=LANE_HEIGHT - 6, fill=COLOURS[seg.kind], class_=f"tl-bar tl-{seg.kind}",
                              data_step=seg.attempt.name if seg.attempt else None)
                parts.append(svg.tag("a", bar, href=link))
            else:
                parts.append(svg.tag("rect", svg.title(words), x=placed.x, y=y + LANE_HEIGHT / 2 - 2,
                                     width=placed.width, height=4, fill=COLOURS[seg.kind],
                                     class_=f"tl-gap tl-{seg.kind}"))
    parts.append(legend(height - LEGEND_HEIGHT + 8))
    return svg.svg(LABEL_WIDTH + CHART_WIDTH, height, "Timeline of the tree: step attempts of each member", *parts,
                   class_="proc-timeline", id="proc-timeline-svg")


def legend(y: float) -> str:
    items, x = [], 4.0
    for kind, word in LEGEND.items():
        gap = kind not in ATTEMPT_KINDS
        items.append(svg.empty("rect", x=x, y=y + (4 if gap else 0), width=14, height=4 if gap else 12,
                               fill=COLOURS[kind]))
        items.append(svg.tag("text", svg.text(word), x=x + 18, y=y + 10, class_="tl-legend"))
        x += 30 + 7 * len(word)
    return svg.tag("g", *items, class_="tl-legend-box")


def text_version(timeline: TreeTimeline) -> list[dict[str, Any]]:
    """The same picture as lines of text (for screen readers, and for copying): one entry per member."""
    return [{"label": lane.member.label, "href": href(lane.member), "depth": lane.member.depth,
             "status": status_words(lane.member.status),
             "segments": [describe(lane.member, p.segment.kind, p.segment.start, p.segment.end, p.segment.attempt)
                          .removeprefix(lane.member.label + " · ") for p in lane.placed]}
            for lane in timeline.lanes]
