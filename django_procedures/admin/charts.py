"""The dashboard's charts as SVG: finished per bucket, duration percentiles per type, queue depth.

Data from :mod:`~django_procedures.admin.activity`, places from
:mod:`~django_procedures.admin.chart_layout`; every bar has a ``<title>`` and links to the list.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse
from django.utils import timezone

import django_procedures.admin.svg as svg
from django_procedures.admin.activity import DEPTH_PARTS
from django_procedures.admin.chart_layout import Bucket, columns, nice_ceiling, span, stack
from django_procedures.admin.display import elapsed
from django_procedures.admin.tree_timeline import round_span

DONE, FAILED = "#1a7f37", "#cf222e"
DEPTH_COLOURS = {"due": "#5b7083", "later": "#b6c2cf", "running": "#1f6feb", "waiting": "#8250df"}
DEPTH_WORDS = {"due": "due now", "later": "due later", "running": "running", "waiting": "waiting for children"}
WIDTH, LEFT, RIGHT = 620, 40, 8


def list_url(**query: Any) -> str:
    url = reverse("admin:django_procedures_procedurerun_changelist")
    return f"{url}?{urlencode(query)}" if query else url


def _moment(moment: datetime) -> str:
    """For the list's date lookups: ISO 8601 with its offset, so it is not read as a naive time."""
    return timezone.localtime(moment).isoformat(timespec="seconds")


def _clock(moment: datetime, seconds: int) -> str:
    local = timezone.localtime(moment)
    return local.strftime("%H:%M") if seconds < 86400 else local.strftime("%Y-%m-%d")


def throughput_chart(buckets: Sequence[Bucket], seconds: int, label: str, label_every: int,
                     chart_id: str) -> str:
    """Stacked columns, done below failed; a column's parts link to the list of what finished in that bucket."""
    top, height = 10, 130
    total_height = top + height + 24
    peak, placed = columns(buckets, LEFT, WIDTH - LEFT - RIGHT, top, height)
    parts = []
    for value in (0, peak / 2, peak) if (peak / 2).is_integer() else (0, peak):  # counts: whole numbers only
        y = round(top + height - height * value / peak, 2)
        parts.append(svg.empty("line", x1=LEFT, x2=WIDTH - RIGHT, y1=y, y2=y, class_="ch-grid"))
        parts.append(svg.tag("text", svg.text(f"{value:g}"), x=LEFT - 6, y=y + 3, text_anchor="end", class_="ch-tick"))
    step = timedelta(seconds=seconds)
    for i, col in enumerate(placed):
        b = col.bucket
        when = f"{_clock(b.start, seconds)} to {_clock(b.start + step, seconds)}"
        window = {"finished_at__gte": _moment(b.start), "finished_at__lt": _moment(b.start + step)}
        if b.done:
            bar = svg.tag("rect", svg.title(f"{when}: {b.done} done"), x=col.x, y=col.done_y, width=col.width,
                          height=col.done_height, fill=DONE, class_="ch-bar ch-done", data_bucket=b.start.isoformat())
            parts.append(svg.tag("a", bar, href=list_url(status__exact="done", **window)))
        if b.failed:
            bar = svg.tag("rect", svg.title(f"{when}: {b.failed} failed or rolled back"), x=col.x, y=col.failed_y,
                          width=col.width, height=col.failed_height, fill=FAILED, class_="ch-bar ch-failed",
                          data_bucket=b.start.isoformat())
            parts.append(svg.tag("a", bar, href=list_url(status__exact="failed", **window)))
        if i % label_every == 0:
            parts.append(svg.tag("text", svg.text(_clock(b.start, seconds)), x=col.x, y=top + height + 14,
                                 class_="ch-tick"))
    parts.append(svg.empty("rect", x=WIDTH - 190, y=top + height + 16, width=10, height=8, fill=DONE))
    parts.append(svg.tag("text", "done", x=WIDTH - 176, y=top + height + 23, class_="ch-legend"))
    parts.append(svg.empty("rect", x=WIDTH - 140, y=top + height + 16, width=10, height=8, fill=FAILED))
    parts.append(svg.tag("text", "failed / rolled back", x=WIDTH - 126, y=top + height + 23, class_="ch-legend"))
    return svg.svg(WIDTH, total_height, label, *parts, class_="proc-chart", id=chart_id)


def percentiles_chart(rows: Sequence[dict[str, Any]], chart_id: str) -> str:
    """Per type, a light bar to p95 and a dark one to p50, on one scale; each row links to that type's list."""
    label_width, row_height, top = 210, 22, 16
    width = WIDTH - label_width - 140
    peak = nice_ceiling(max((r["p95"] or 0 for r in rows), default=0))
    parts = [svg.tag("text", "0", x=label_width, y=11, class_="ch-tick"),
             svg.tag("text", svg.text(round_span(peak)), x=label_width + width, y=11, text_anchor="end",
                     class_="ch-tick")]
    for i, row in enumerate(rows):
        y = top + i * row_height
        p50, p95 = row["p50"] or 0.0, row["p95"] or 0.0
        words = f"{row['type_name']}: p50 {elapsed(p50)}, p95 {elapsed(p95)} over {row['n']} done"
        group = [svg.title(words),
                 svg.tag("text", svg.text(_short(row["type_name"], 32)), x=4, y=y + 14, class_="ch-label"),
                 svg.empty("rect", x=label_width, y=y + 3, width=max(span(p95, peak, width), 1), height=14,
                           fill="#9ecbff", class_="ch-bar ch-p95"),
                 svg.empty("rect", x=label_width, y=y + 3, width=max(span(p50, peak, width), 1), height=14,
                           fill="#0969da", class_="ch-bar ch-p50"),
                 svg.tag("text", svg.text(f"{elapsed(p50)} · {elapsed(p95)} (n={row['n']})"),
                         x=label_width + width + 6, y=y + 14, class_="ch-tick")]
        parts.append(svg.tag("a", *group, href=list_url(type_name=row["type_name"], status__exact="done"),
                             class_="ch-row", data_type=row["type_name"]))
    legend_y = top + len(rows) * row_height + 6
    parts.append(svg.empty("rect", x=label_width, y=legend_y, width=10, height=8, fill="#0969da"))
    parts.append(svg.tag("text", "p50 (median)", x=label_width + 14, y=legend_y + 8, class_="ch-legend"))
    parts.append(svg.empty("rect", x=label_width + 100, y=legend_y, width=10, height=8, fill="#9ecbff"))
    parts.append(svg.tag("text", "p95", x=label_width + 114, y=legend_y + 8, class_="ch-legend"))
    return svg.svg(WIDTH, legend_y + 14, "Duration percentiles per procedure type", *parts, class_="proc-chart",
                   id=chart_id)


def depth_chart(rows: Sequence[dict[str, Any]], chart_id: str) -> str:
    """Per queue, one stacked bar of its unfinished procedures by part; each part links to the queue's list."""
    label_width, row_height, top = 160, 22, 6
    width = WIDTH - label_width - 80
    peak = nice_ceiling(max((r["total"] for r in rows), default=0))
    parts = []
    for i, row in enumerate(rows):
        y = top + i * row_height
        parts.append(svg.tag("text", svg.text(_short(row["queue"], 24)), x=4, y=y + 14, class_="ch-label"))
        for name, value, x, w in stack([(p, row[p]) for p in DEPTH_PARTS], peak, label_width, width):
            bar = svg.tag("rect", svg.title(f"queue {row['queue']}: {value} {DEPTH_WORDS[name]}"), x=x, y=y + 3,
                          width=w, height=14, fill=DEPTH_COLOURS[name], class_=f"ch-bar ch-{name}")
            parts.append(svg.tag("a", bar, href=list_url(queue=row["queue"], **_status_query(name)),
                                 data_queue=row["queue"]))
        parts.append(svg.tag("text", svg.text(str(row["total"])), x=label_width + span(row["total"], peak, width) + 6,
                             y=y + 14, class_="ch-tick"))
    legend_y, x = top + len(rows) * row_height + 6, float(label_width)
    for name in DEPTH_PARTS:
        parts.append(svg.empty("rect", x=x, y=legend_y, width=10, height=8, fill=DEPTH_COLOURS[name]))
        parts.append(svg.tag("text", svg.text(DEPTH_WORDS[name]), x=x + 14, y=legend_y + 8, class_="ch-legend"))
        x += 24 + 6.5 * len(DEPTH_WORDS[name])
    return svg.svg(WIDTH, legend_y + 14, "Queue depth: unfinished procedures per queue", *parts, class_="proc-chart",
                   id=chart_id)


def _status_query(part: str) -> dict[str, str]:
    return {"running": {"status__exact": "running"}, "waiting": {"status__exact": "waiting"}}.get(part, {})


def _short(value: str, most: int) -> str:
    return value if len(value) <= most else "…" + value[-(most - 1):]
