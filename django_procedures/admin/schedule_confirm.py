"""Pause, resume, trigger-now and delete as confirmable bulk actions: what their pages and messages say, how
they run.

The request flow (confirmation page, permission, messages, admin log) is
``admin.bulk``'s; the work is the plain functions of ``admin.schedule_actions``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.admin.models import DELETION, LogEntry
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy, ngettext_lazy

import django_procedures.admin.schedule_actions as actions
from django_procedures.admin.bulk import ActionResult, BulkAction, Performer, Plan, Planner, operator
from django_procedures.models import Schedule

REASON_LIMIT = 500
LEFT_ALONE = ngettext_lazy("%(count)d schedule was left alone: %(reasons)s",
                           "%(count)d schedules were left alone: %(reasons)s", "count")


def _default_reason(request: HttpRequest) -> str:
    return f"paused by {operator(request)}"


def _planner(plan: Callable[[list[Schedule]], list[actions.PlanItem]]) -> Planner:
    def planned(request: HttpRequest, selected: list[Schedule]) -> Plan:
        items = plan(selected)
        return Plan(items, sum(1 for item in items if item.changes), {"default_reason": _default_reason(request)})

    return planned


def _performer(perform: Callable[[HttpRequest, list[int]], actions.ScheduleActionReport], done: Any) -> Performer:
    """``done`` takes ``%(count)d`` and ``%(outcome)s`` (trigger-now's summed result)."""

    def performed(request: HttpRequest, selected: list[Schedule]) -> ActionResult:
        report = perform(request, [s.pk for s in selected])
        n = len(report.changed)
        message = done % {"count": n, "outcome": actions.trigger_summary(report.totals) if report.totals else ""}
        return ActionResult(message if n else "", report.refused, [((pk,), change) for pk, change in report.changed])

    return performed


def _pause(request: HttpRequest, ids: list[int]) -> actions.ScheduleActionReport:
    reason = " ".join(request.POST.get("reason", "").split())[:REASON_LIMIT]
    return actions.pause_schedules(ids, reason=reason or _default_reason(request))


PAUSE = BulkAction(
    kind="pause",
    label=gettext_lazy("Pause"),
    title=ngettext_lazy("Pause %(count)d schedule?", "Pause %(count)d schedules?", "count"),
    confirm=ngettext_lazy("Yes, pause %(count)d schedule", "Yes, pause %(count)d schedules", "count"),
    refusal=LEFT_ALONE,
    plan=_planner(actions.plan_pause),
    perform=_performer(_pause, ngettext_lazy("Paused %(count)d schedule.", "Paused %(count)d schedules.", "count")),
)

RESUME = BulkAction(
    kind="resume",
    label=gettext_lazy("Resume"),
    title=ngettext_lazy("Resume %(count)d schedule?", "Resume %(count)d schedules?", "count"),
    confirm=ngettext_lazy("Yes, resume %(count)d schedule", "Yes, resume %(count)d schedules", "count"),
    refusal=LEFT_ALONE,
    plan=_planner(actions.plan_resume),
    perform=_performer(lambda request, ids: actions.resume_schedules(ids),
                       ngettext_lazy("Resumed %(count)d schedule.", "Resumed %(count)d schedules.", "count")),
)

TRIGGER = BulkAction(
    kind="trigger",
    label=gettext_lazy("Trigger now"),
    title=ngettext_lazy("Trigger %(count)d schedule now?", "Trigger %(count)d schedules now?", "count"),
    confirm=ngettext_lazy("Yes, trigger %(count)d schedule now", "Yes, trigger %(count)d schedules now", "count"),
    refusal=ngettext_lazy("%(count)d schedule was not triggered: %(reasons)s",
                          "%(count)d schedules were not triggered: %(reasons)s", "count"),
    plan=_planner(lambda rows: actions.plan_trigger(rows, timezone.now())),
    perform=_performer(lambda request, ids: actions.trigger_schedules(ids),
                       ngettext_lazy("Triggered %(count)d schedule: %(outcome)s.",
                                     "Triggered %(count)d schedules: %(outcome)s.", "count")),
)


def _delete(request: HttpRequest, selected: list[Schedule]) -> ActionResult:
    """Delete through the store; the admin log gets a deletion entry per schedule (its row is gone after)."""
    report = actions.delete_schedules([s.pk for s in selected], by=operator(request))
    deleted = dict(report.changed)
    for s in selected:
        if s.pk in deleted:
            LogEntry.objects.log_actions(user_id=request.user.pk,  # type: ignore[arg-type]  # admin: logged in
                                         queryset=[s], action_flag=DELETION,
                                         change_message=deleted[s.pk])
    n = len(deleted)
    message = ngettext_lazy("Deleted %(count)d schedule.", "Deleted %(count)d schedules.", "count") % {"count": n}
    return ActionResult(message if n else "", report.refused, ())


DELETE = BulkAction(
    kind="delete",
    label=gettext_lazy("Delete"),
    title=ngettext_lazy("Delete %(count)d schedule?", "Delete %(count)d schedules?", "count"),
    confirm=ngettext_lazy("Yes, delete %(count)d schedule", "Yes, delete %(count)d schedules", "count"),
    refusal=ngettext_lazy("%(count)d schedule was not deleted: %(reasons)s",
                          "%(count)d schedules were not deleted: %(reasons)s", "count"),
    plan=_planner(actions.plan_delete),
    perform=_delete,
    danger=True,
)
