"""``procedures list``: procedures newest first, filtered, a page at a time (never a count of the table)."""

from __future__ import annotations

import argparse
from typing import Any

from django.db.models import Q

from django_procedures import clock
from django_procedures.cli.common import (
    add_filters,
    ago,
    describe_filters,
    filtered,
    has_filters,
    newest,
    procedure_id,
)
from django_procedures.cli.output import Output, Refused
from django_procedures.models import ProcedureRun

HELP = "List procedures, newest first: filter by status, type, queue, age or error text."
#: The columns read for a row (never the state, output or traceback).
FIELDS = ("id", "type_name", "status", "queue", "step", "step_name", "attempt", "created_at", "finished_at",
          "error")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_filters(parser)
    parser.add_argument("--limit", type=_positive, default=50, help="most rows shown (default 50)")
    parser.add_argument("--before", metavar="ID",
                        help="the next page: procedures created before this one (the last id of a page)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"must be between 1 and 10000; got {value}")
    return value


def as_dict(run: ProcedureRun) -> dict[str, Any]:
    return {"id": str(run.id), "type": run.type_name, "status": run.status, "queue": run.queue, "step": run.step,
            "step_name": run.step_name, "attempt": run.attempt, "created_at": run.created_at,
            "finished_at": run.finished_at, "error": run.error}


def run(options: dict[str, Any], out: Output) -> None:
    limit = options["limit"]
    qs = filtered(options)
    if options.get("before"):
        anchor = procedure_id(options["before"])
        at = ProcedureRun.objects.filter(id=anchor).values_list("created_at", flat=True).first()
        if at is None:
            raise Refused(f"procedure {anchor} does not exist; --before takes an id of a listed procedure")
        # Keyset: (created_at, id) < the anchor's, the list indexes' own order.
        qs = qs.filter(Q(created_at__lt=at) | Q(created_at=at, id__lt=anchor))
    rows = newest(qs.only(*FIELDS), limit + 1, options)
    more, rows = len(rows) > limit, rows[:limit]
    if out.as_json:
        out.document({"procedures": [as_dict(r) for r in rows], "limit": limit, "more": more,
                      "next_before": str(rows[-1].id) if more else None})
    elif rows:
        now = clock.now()
        out.table(["id", "status", "type", "queue", "step", "age", "error"],
                  [[str(r.id), r.status, r.type_name, r.queue, r.step_name or str(r.step),
                    ago((now - r.created_at).total_seconds()), r.error or "-"] for r in rows])
        if more:
            out.note(f"more procedures match; the next page: --before {rows[-1].id}")
    if not rows:
        if has_filters(options) or options.get("before"):
            raise Refused(f"no procedure matches {describe_filters(options)}")
        if not out.as_json:
            out.line("no procedures")
