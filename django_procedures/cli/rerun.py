"""``procedures rerun``: new runs of final procedures from a step (ids, or ``--final`` filters)."""

from __future__ import annotations

import argparse
from typing import Any

from django_procedures import registry
from django_procedures.cli import bulk
from django_procedures.cli.common import (
    actor,
    add_filters,
    describe_filters,
    filtered,
    procedure_ids,
    require_known,
)
from django_procedures.cli.output import Output, Refused
from django_procedures.exceptions import UnknownProcedureType
from django_procedures.models import ProcedureRun
from django_procedures.policy.status import FINAL
from django_procedures.store.rerun import rerun_many, step_names

HELP = "Re-run final procedures from a step (default: the first) as new runs linked to them."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ids", nargs="*", metavar="ID", help="procedure ids")
    parser.add_argument("--from-step", metavar="STEP", default=None,
                        help="the step the new runs start at, with the state saved before it (default: the first "
                             "step, with the state as submitted)")
    parser.add_argument("--final", action="store_true",
                        help="every final procedure matching the filters instead of ids (e.g. --status failed)")
    add_filters(parser, statuses=sorted(s.value for s in FINAL))
    bulk.add_arguments(parser)


def run(options: dict[str, Any], out: Output) -> None:
    by_filter = bulk.by_filter(options, filters="--final with filters (--status, --type, --since, ...)",
                              chosen=options["final"])
    if by_filter:
        runs = bulk.select(filtered(options, ProcedureRun.objects.filter(status__in=sorted(FINAL))), options)
        if not runs:
            raise Refused(f"no final procedure matches {describe_filters(options)}")
    else:
        runs = list(require_known(procedure_ids(options["ids"])).values())
    from_step = options["from_step"]
    refusals = {r.id: f"it is {r.status}, not final: only a final procedure is re-run" for r in runs
                if r.status not in FINAL}
    for r in runs:  # the store would refuse these one by one after the others had been re-run
        if r.id not in refusals and not _known(r.type_name):
            refusals[r.id] = f"no procedure class is registered as {r.type_name!r} in this code"
    if from_step is not None:
        for r in runs:
            steps = step_names(r.type_name)
            if r.id not in refusals and steps and from_step not in steps and not _renamed(r.type_name, from_step):
                refusals[r.id] = f"{r.type_name} has no step {from_step!r} (its steps: {', '.join(steps)})"
    if refusals and not by_filter:
        pid, reason = next(iter(refusals.items()))
        more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
        raise Refused(f"procedure {pid} cannot be re-run: {reason}{more}; nothing was re-run")
    chosen = [r for r in runs if r.id not in refusals]
    if not chosen:
        raise Refused(f"none of the {len(runs)} matching procedures can be re-run; nothing was re-run")
    if options["dry_run"]:
        for pid, why in refusals.items():  # as retry's dry run says them, and as the real re-run would
            out.note(f"left alone: procedure {pid}: {why}")
        bulk.report_plan(out, "rerun", chosen, refusals, {r.id: f"from {from_step or 'the first step'}"
                                                          for r in chosen})
        return
    out.confirm(len(chosen), "re-run", yes=options["yes"])
    results = rerun_many([r.id for r in chosen], from_step, by=actor())
    done = [r for r in results if r.ok]
    refused = [*((pid, why) for pid, why in refusals.items()), *((r.original, r.refusal) for r in results if not r.ok)]
    if out.as_json:
        out.document({"dry_run": False, "reruns": {str(r.original): str(r.rerun) for r in done},
                      "refused": [{"id": str(p), "reason": why} for p, why in refused]})
    else:
        out.line(f"re-ran {len(done)} procedure{'s' if len(done) != 1 else ''}"
                 f" from {from_step or 'the first step'}")
        out.table(["original", "new run"], [[str(r.original), str(r.rerun)] for r in done])
        for pid, why in refused:
            out.note(f"left alone: procedure {pid}: {why}")
    failed = [r for r in results if not r.ok]
    if failed:
        raise Refused(f"{len(failed)} procedure(s) were refused by the store; see above")


def _known(type_name: str) -> bool:
    try:
        registry.get(type_name)
    except UnknownProcedureType:
        return False
    return True


def _renamed(type_name: str, name: str) -> bool:
    """Whether ``name`` is an old step name the class maps (``renamed_steps``): the store resolves it."""
    try:
        return name in registry.get(type_name).renamed_steps
    except UnknownProcedureType:
        return False
