"""``procedures cancel``: cancel procedures and their unfinished subtrees (ids, or filters)."""

from __future__ import annotations

import argparse
from typing import Any

from django_procedures.cli import bulk
from django_procedures.cli.common import actor, add_filters, describe_filters, filtered, procedure_ids, require_known
from django_procedures.cli.output import Output, Refused
from django_procedures.models import ProcedureRun
from django_procedures.policy.status import FINAL, UNFINISHED
from django_procedures.store import tree
from django_procedures.store.batches import cancel_procedures

HELP = "Cancel procedures and their unfinished sub-procedures: by id, or by filters (unfinished ones only)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ids", nargs="*", metavar="ID", help="procedure ids")
    add_filters(parser, statuses=[s.value for s in UNFINISHED])
    bulk.add_arguments(parser)


def run(options: dict[str, Any], out: Output) -> None:
    if bulk.by_filter(options, filters="filters (--status, --type, --queue, --since, ...)"):
        base = None if options.get("status") else ProcedureRun.objects.filter(status__in=UNFINISHED)
        runs = bulk.select(filtered(options, base), options)
        if not runs:
            raise Refused(f"no unfinished procedure matches {describe_filters(options)}")
    else:
        found = require_known(procedure_ids(options["ids"]))
        runs = list(found.values())
        final = [r for r in runs if r.status in FINAL]
        if final:
            more = f" (and {len(final) - 1} more)" if len(final) > 1 else ""
            raise Refused(f"procedure {final[0].id} is already {final[0].status.replace('_', ' ')}{more}; "
                          "nothing was cancelled")
    if options["dry_run"]:
        notes = {}
        for r in runs:  # each subtree read once, without locks (tree.subtree): a plan, not a write
            members = tree.subtree(r.id)
            unfinished = ProcedureRun.objects.filter(id__in=members).exclude(status__in=FINAL).count()
            notes[r.id] = f"{unfinished} unfinished in its subtree" if len(members) > 1 else "-"
        bulk.report_plan(out, "cancel", runs, {}, notes)
        return
    out.confirm(len(runs), "cancel", yes=options["yes"])
    report = cancel_procedures([r.id for r in runs], by=actor())
    # "cancelled with an ancestor selected with it" is not a refusal: it was cancelled.
    refused = [(p, why) for p, why in report.unchanged if "with an ancestor" not in why]
    if out.as_json:
        out.document({"dry_run": False,
                      "cancelled": {str(k): [str(c) for c in v] for k, v in report.cancelled.items()},
                      "unchanged": [{"id": str(p), "reason": why} for p, why in report.unchanged]})
    else:
        out.line(f"cancelled {report.count} procedure{'s' if report.count != 1 else ''}")
        for pid, ids in report.cancelled.items():
            out.line(f"  {pid}" + (f" (and {len(ids) - 1} below it)" if len(ids) > 1 else ""))
    if refused:
        for _pid, why in refused:
            out.note(why)
        raise Refused(f"{len(refused)} procedure(s) were not cancelled; see above")
