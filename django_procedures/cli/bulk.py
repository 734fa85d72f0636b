"""What the bulk actions (retry, cancel) share: ``--dry-run --yes --limit --json``, ids or filters, the plan."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from django_procedures.cli.common import has_filters, newest
from django_procedures.cli.output import Output, Usage
from django_procedures.models import ProcedureRun

#: Columns a selection reads (never the state, output or traceback).
FIELDS = ("id", "type_name", "status", "queue", "parent_id", "root_id", "depth", "spawned_in", "schedule_id",
          "suspension", "failure_can_retry", "failure_handled", "error", "step", "step_name", "created_at")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=1000,
                        help="most procedures one run touches when selecting by filters, newest first (default 1000)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be touched and change nothing")
    parser.add_argument("--yes", action="store_true", help="do not ask before touching more than 100 procedures")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def by_filter(options: dict[str, Any], *, filters: str, chosen: bool = False) -> bool:
    """Whether the procedures are selected by filters (else by ids); ids with filters, or neither, is bad usage.

    ``filters`` says how to select by filters (for the message); ``chosen``: a flag asked for them.
    """
    by_filters = chosen or has_filters(options)
    if options["ids"] and by_filters:
        raise Usage(f"give procedure ids or {filters}, not both")
    if not options["ids"] and not by_filters:
        raise Usage(f"give procedure ids, or {filters}")
    if options["limit"] < 1:
        raise Usage(f"--limit must be at least 1; got {options['limit']}")
    return by_filters


def select(queryset: Any, options: dict[str, Any]) -> list[ProcedureRun]:
    """The newest ``--limit`` procedures of ``queryset`` (one index range; never a count)."""
    limit = options["limit"]
    return newest(queryset.only(*FIELDS), limit, options)


def report_plan(out: Output, verb: str, runs: Sequence[ProcedureRun], refusals: dict[Any, str],
                notes: dict[Any, str] | None = None) -> None:
    """What a ``--dry-run`` would touch: one row per procedure (nothing is changed)."""
    notes = notes or {}
    if out.as_json:
        out.document({"dry_run": True, f"would_{verb}": [
            {"id": str(r.id), "type": r.type_name, "status": r.status, "queue": r.queue,
             **({"note": notes[r.id]} if r.id in notes else {})} for r in runs],
            "refused": [{"id": str(p), "reason": why} for p, why in refusals.items()]})
        return
    out.line(f"would {verb} {len(runs)} procedure{'s' if len(runs) != 1 else ''} (dry run: nothing changed)")
    out.table(["id", "status", "type", "queue", "note"],
              [[str(r.id), r.status, r.type_name, r.queue, notes.get(r.id, "-")] for r in runs])
