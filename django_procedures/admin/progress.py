"""Progress in the admin: a bar for ``ctx.progress()`` reports, and how many of a parent's children are done."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.db.models import Count, Q
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_procedures.models import ProcedureRun
from django_procedures.policy.progress import fraction
from django_procedures.policy.status import RunStatus


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def progress_bar(progress: dict[str, Any] | None) -> SafeString | str:
    """``<progress>`` with ``done/total · note`` for a report with a total; ``done · note`` without one."""
    if not progress:
        return ""
    done, total, note = progress.get("done"), progress.get("total"), progress.get("note") or ""
    share = fraction(progress)
    label = f"{_number(done)}/{_number(total)}" if share is not None else f"{_number(done)} done"
    if note:
        label = f"{label} · {note}"
    if share is None:
        return format_html('<span class="proc-progress-text" title="{}">{}</span>', note, label)
    return format_html('<span class="proc-progress" title="{}"><progress value="{}" max="1">{}%</progress> '
                       '<span class="proc-progress-text">{}</span></span>', note, f"{share:.4f}",
                       round(share * 100), label)


def children_bar(done: int, total: int) -> SafeString | str:
    if not total:
        return ""
    return format_html('<span class="proc-progress proc-children"><progress value="{}" max="{}">{}/{}</progress> '
                       '<span class="proc-progress-text">{}</span></span>', done, total, done, total,
                       f"{done}/{total} children done")


def children_done(parent_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, tuple[int, int]]:
    """``(done, total)`` children of each parent's latest suspension, in one query (the parent index)."""
    ids = list(parent_ids)
    if not ids:
        return {}
    rows = (ProcedureRun.objects.filter(parent_id__in=ids).order_by().values("parent_id", "spawned_in")
            .annotate(total=Count("id"), done=Count("id", filter=Q(status=RunStatus.DONE))))
    latest: dict[uuid.UUID, tuple[int, int, int]] = {}
    for row in rows:
        seen = latest.get(row["parent_id"])
        if seen is None or row["spawned_in"] > seen[0]:
            latest[row["parent_id"]] = (row["spawned_in"], row["done"], row["total"])
    return {pid: (done, total) for pid, (_, done, total) in latest.items()}


def list_cell(run: ProcedureRun) -> SafeString | str:
    """The list's progress column: the step's report, else a waiting parent's children."""
    bar = progress_bar(run.progress)
    if bar:
        return bar
    counts = getattr(run, "children_counts", None)
    return children_bar(*counts) if counts else ""
