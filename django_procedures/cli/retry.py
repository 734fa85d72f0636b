"""``procedures retry``: failed procedures ready again from their last checkpoint (ids, or ``--failed`` filters)."""

from __future__ import annotations

import argparse
from typing import Any

from django_procedures.cli import bulk
from django_procedures.cli.common import actor, add_filters, describe_filters, filtered, procedure_ids, require_known
from django_procedures.cli.output import Output, Refused
from django_procedures.models import ProcedureRun
from django_procedures.policy.status import RunStatus
from django_procedures.store.batches import retry_procedures, retry_refusals

HELP = "Retry failed procedures from their last checkpoint: by id, or --failed with filters."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ids", nargs="*", metavar="ID", help="procedure ids")
    parser.add_argument("--failed", action="store_true",
                        help="every retryable failed procedure matching the filters instead of ids")
    add_filters(parser, statuses=[RunStatus.FAILED.value])
    bulk.add_arguments(parser)


def run(options: dict[str, Any], out: Output) -> None:
    by_filter = bulk.by_filter(options, filters="--failed with filters (--type, --queue, --since, ...)",
                              chosen=options["failed"])
    if by_filter:
        base = ProcedureRun.objects.filter(status=RunStatus.FAILED, failure_can_retry=True)  # the retryable index
        runs = bulk.select(filtered(options, base), options)
        if not runs:
            raise Refused(f"no retryable failed procedure matches {describe_filters(options)}")
    else:
        found = require_known(procedure_ids(options["ids"]))
        runs = list(found.values())
    refusals = retry_refusals(runs)
    if refusals and not by_filter:
        pid, reason = next(iter(refusals.items()))
        more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
        raise Refused(f"procedure {pid} cannot be retried: {reason}{more}; nothing was retried")
    chosen = [r for r in runs if r.id not in refusals]
    for pid, reason in refusals.items():
        out.note(f"left alone: procedure {pid}: {reason}")
    if not chosen:
        raise Refused(f"none of the {len(runs)} matching procedures can be retried now; nothing was retried")
    if options["dry_run"]:
        bulk.report_plan(out, "retry", chosen, refusals)
        return
    out.confirm(len(chosen), "retry", yes=options["yes"])
    report = retry_procedures([r.id for r in chosen], by=actor())
    if out.as_json:
        out.document({"dry_run": False, "retried": [str(p) for p in report.retried],
                      "descendants": {str(k): [str(c) for c in v] for k, v in report.descendants.items()},
                      "refused": [{"id": str(p), "reason": why} for p, why in [*refusals.items(), *report.refused]]})
    else:
        extra = sum(len(v) for v in report.descendants.values())
        out.line(f"retried {len(report.retried)} procedure{'s' if len(report.retried) != 1 else ''}"
                 + (f" (and {extra} of their descendants)" if extra else ""))
        for pid in report.retried:
            out.line(f"  {pid}")
    if report.refused:
        for _pid, reason in report.refused:
            out.note(reason)
        raise Refused(f"{len(report.refused)} procedure(s) were refused by the store; see above")

