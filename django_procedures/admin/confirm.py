"""Retry and cancel as confirmable bulk actions: what their pages and messages say, and how they run.

The request flow (confirmation page, permission, messages, admin log) is
``admin.bulk``'s; the work is the plain functions of ``admin.actions``.
"""

from __future__ import annotations

from django.http import HttpRequest
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext, ngettext_lazy

import django_procedures.admin.actions as actions
from django_procedures.admin.bulk import ActionResult, BulkAction, Plan, operator
from django_procedures.models import ProcedureRun


def _plan_retry(request: HttpRequest, runs: list[ProcedureRun]) -> Plan:
    items = actions.plan_retry(runs)
    return Plan(items, sum(1 for item in items if item.will_retry))


def _retry(request: HttpRequest, runs: list[ProcedureRun]) -> ActionResult:
    report = actions.retry_procedures([r.id for r in runs], by=operator(request))
    n, below = len(report.retried), sum(len(ids) for ids in report.descendants.values())
    done = ngettext("Retried %(count)d procedure; it is ready again.",
                    "Retried %(count)d procedures; they are ready again.", n) % {"count": n}
    if below:  # a parent failed by its children waits for them instead
        done = ngettext("Retried %(count)d procedure", "Retried %(count)d procedures", n) % {"count": n} + " " + (
            ngettext("with %(below)d sub-procedure that failed it; a parent waits for what it retried.",
                     "with %(below)d sub-procedures that failed them; a parent waits for what it retried.", below)
            % {"below": below})
    return ActionResult(done if n else "", report.refused, [(report.retried, _(
        "Retried from the admin: resumes from its last checkpoint with a fresh retry budget."))] + [
        (ids, _("Retried from the admin with its ancestor %(id)s, which failed through it.") % {"id": parent})
        for parent, ids in report.descendants.items()])


def _plan_cancel(request: HttpRequest, runs: list[ProcedureRun]) -> Plan:
    items = actions.plan_cancel(r.id for r in runs)
    return Plan(items, sum(len(item.members) for item in items))


def _cancel(request: HttpRequest, runs: list[ProcedureRun]) -> ActionResult:
    report = actions.cancel_procedures([r.id for r in runs], by=operator(request))
    n, roots = report.count, len(report.cancelled)
    done = (ngettext("Cancelled %(count)d procedure", "Cancelled %(count)d procedures", n) % {"count": n}
            + " " + ngettext("(%(selected)d selected, with its unfinished sub-procedures).",
                             "(%(selected)d selected, with their unfinished sub-procedures).",
                             roots) % {"selected": roots})
    return ActionResult(done if n else "", report.unchanged, [
        (ids, _("Cancelled from the admin with the subtree of %(id)s.") % {"id": selected})
        for selected, ids in report.cancelled.items()])


RETRY = BulkAction(
    kind="retry",
    label=gettext_lazy("Retry"),
    title=ngettext_lazy("Retry %(count)d procedure?", "Retry %(count)d procedures?", "count"),
    confirm=ngettext_lazy("Yes, retry %(count)d procedure", "Yes, retry %(count)d procedures", "count"),
    refusal=ngettext_lazy("%(count)d procedure was not retried: %(reasons)s",
                          "%(count)d procedures were not retried: %(reasons)s", "count"),
    plan=_plan_retry,
    perform=_retry,
)

CANCEL = BulkAction(
    kind="cancel",
    label=gettext_lazy("Cancel"),
    title=ngettext_lazy("Cancel %(count)d procedure?", "Cancel %(count)d procedures?", "count"),
    confirm=ngettext_lazy("Yes, cancel %(count)d procedure", "Yes, cancel %(count)d procedures", "count"),
    refusal=ngettext_lazy("%(count)d procedure was left alone: %(reasons)s",
                          "%(count)d procedures were left alone: %(reasons)s", "count"),
    plan=_plan_cancel,
    perform=_cancel,
    danger=True,
)
