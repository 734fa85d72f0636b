""""Re-run from step…" as a confirmable bulk action and a button, and the links between a run and its re-runs.

The request flow is ``admin.bulk``'s; the work is ``store.rerun.rerun_many`` (one transaction per procedure).
The confirmation page is also the form: it lists the steps of the selected procedures' type (they must share
one) and the step chosen comes back with the confirmed POST.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext, ngettext_lazy

from django_procedures.admin.bulk import ActionResult, BulkAction, Plan, operator
from django_procedures.models import ProcedureRun
from django_procedures.policy.status import FINAL
from django_procedures.store.rerun import rerun_many, step_names

#: The form field naming the step to re-run from.
FIELD = "from_step"
#: The most re-runs a procedure page lists.
LINKS_SHOWN = 20


@dataclass(frozen=True)
class RerunPlanItem:
    """One selected procedure and what re-running it would do."""

    run: ProcedureRun
    will_rerun: bool
    change: str


def _chosen(request: HttpRequest, steps: list[str]) -> str:
    chosen = request.POST.get(FIELD, "")
    return chosen if chosen in steps else (steps[0] if steps else "")


def _plan(request: HttpRequest, runs: list[ProcedureRun]) -> Plan:
    types = sorted({run.type_name for run in runs})
    if len(types) > 1:
        problem = _("The selected procedures are of %(count)d types (%(types)s); a re-run starts from a step of one "
                    "type: select procedures of one type (filter the list by type).") % {
            "count": len(types), "types": ", ".join(types)}
        return Plan([RerunPlanItem(run, False, _("left alone")) for run in runs], 0, {"rerun_problem": problem})
    steps = step_names(types[0]) if types else []
    if not steps:
        problem = _("No procedure class is registered as %(type)s in this process, so its steps are unknown.") % {
            "type": types[0] if types else "?"}
        return Plan([RerunPlanItem(run, False, _("left alone")) for run in runs], 0, {"rerun_problem": problem})
    items = [RerunPlanItem(run, True, _("a new run starts from the step chosen, with the state committed before it"))
             if run.status in FINAL else
             RerunPlanItem(run, False, _("left alone: it is %(status)s; only final procedures can be re-run")
                           % {"status": run.status.replace("_", " ")}) for run in runs]
    return Plan(items, sum(1 for item in items if item.will_rerun),
                {"rerun_steps": steps, "rerun_chosen": _chosen(request, steps), "rerun_field": FIELD})


def _perform(request: HttpRequest, runs: list[ProcedureRun]) -> ActionResult:
    types = {run.type_name for run in runs}
    steps = step_names(next(iter(types))) if len(types) == 1 else []
    chosen = request.POST.get(FIELD, "")
    if chosen not in steps:
        refusal = (_("the selected procedures are not of one type") if len(types) > 1 else
                   _("%(step)r is not a step of %(type)s") % {"step": chosen, "type": ", ".join(types)})
        return ActionResult("", [(run.id, refusal) for run in runs])
    results = rerun_many([run.id for run in runs], chosen, by=operator(request))
    made = [r for r in results if r.ok]
    n = len(made)
    done = ngettext("Re-ran %(count)d procedure from step %(step)s; the new run is ready.",
                    "Re-ran %(count)d procedures from step %(step)s; the new runs are ready.", n) % {
        "count": n, "step": chosen}
    return ActionResult(done if n else "", [(r.original, r.refusal) for r in results if not r.ok], [
        ([r.original], _("Re-run from the admin from step %(step)s as %(id)s.") % {"step": chosen, "id": r.rerun})
        for r in made])


RERUN = BulkAction(
    kind="rerun",
    label=gettext_lazy("Re-run from step"),
    title=ngettext_lazy("Re-run %(count)d procedure from a step?", "Re-run %(count)d procedures from a step?",
                        "count"),
    confirm=ngettext_lazy("Yes, re-run %(count)d procedure", "Yes, re-run %(count)d procedures", "count"),
    refusal=ngettext_lazy("%(count)d procedure was not re-run: %(reasons)s",
                          "%(count)d procedures were not re-run: %(reasons)s", "count"),
    plan=_plan,
    perform=_perform,
)


def links(run: ProcedureRun) -> dict[str, Any]:
    """The procedure page's links: the run it re-ran (None if none; ``rerun_of_gone`` if pruned) and its re-runs."""
    original = None
    if run.rerun_of_id is not None:
        original = ProcedureRun.objects.filter(id=run.rerun_of_id).only("id", "type_name", "status").first()
    reruns = list(ProcedureRun.objects.filter(rerun_of_id=run.id).only("id", "type_name", "status", "step_name",
                                                                        "created_at")
                  .order_by("-created_at", "-id")[:LINKS_SHOWN])
    return {"rerun_of": original, "rerun_of_gone": run.rerun_of_id is not None and original is None,
            "reruns": reruns, "reruns_cut": len(reruns) == LINKS_SHOWN}
