"""Confirm, then perform: the request side of pause, resume and trigger-now (actions and buttons).

The same pattern as the procedures' ``confirm``: the admin method shows a
confirmation page listing what will change; the confirmed POST performs the
work (``admin.schedule_actions``), reports with plural-aware counts, and
records an admin log entry per changed schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.contrib import messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext_lazy

from django_procedures.admin import schedule_actions as actions
from django_procedures.admin.confirm import operator
from django_procedures.models import Schedule

TEMPLATE = "admin/django_procedures/schedule/confirm_action.html"
REASON_LIMIT = 500


class ScheduleConfirmations:
    """Mixin for ``ScheduleAdmin``: the confirmation page and the outcome of each action."""

    # Provided by ModelAdmin, which follows this mixin in the admin's bases.
    admin_site: Any
    opts: Any
    message_user: Any

    def confirm_pause(self, request: HttpRequest, queryset: Any, *, from_action: bool) -> HttpResponse | None:
        def perform(ids: list[int]) -> actions.Report:
            reason = " ".join(request.POST.get("reason", "").split())[:REASON_LIMIT]
            return actions.pause_schedules(ids, reason=reason or f"paused by {operator(request)}")

        return self._confirm(request, queryset, from_action, "pause", actions.plan_pause, perform,
                             title=ngettext_lazy("Pause %(count)d schedule?", "Pause %(count)d schedules?", "count"),
                             done=ngettext_lazy("Paused %(count)d schedule.", "Paused %(count)d schedules.", "count"),
                             refusal=ngettext_lazy("%(count)d schedule was left alone: %(reasons)s",
                                                   "%(count)d schedules were left alone: %(reasons)s", "count"))

    def confirm_resume(self, request: HttpRequest, queryset: Any, *, from_action: bool) -> HttpResponse | None:
        return self._confirm(request, queryset, from_action, "resume", actions.plan_resume, actions.resume_schedules,
                             title=ngettext_lazy("Resume %(count)d schedule?", "Resume %(count)d schedules?", "count"),
                             done=ngettext_lazy("Resumed %(count)d schedule.", "Resumed %(count)d schedules.",
                                                "count"),
                             refusal=ngettext_lazy("%(count)d schedule was left alone: %(reasons)s",
                                                   "%(count)d schedules were left alone: %(reasons)s", "count"))

    def confirm_trigger(self, request: HttpRequest, queryset: Any, *, from_action: bool) -> HttpResponse | None:
        return self._confirm(request, queryset, from_action, "trigger",
                             lambda rows: actions.plan_trigger(rows, timezone.now()), actions.trigger_schedules,
                             title=ngettext_lazy("Trigger %(count)d schedule now?", "Trigger %(count)d schedules now?",
                                                 "count"),
                             done=ngettext_lazy("Triggered %(count)d schedule: %(outcome)s.",
                                                "Triggered %(count)d schedules: %(outcome)s.", "count"),
                             refusal=ngettext_lazy("%(count)d schedule was not triggered: %(reasons)s",
                                                   "%(count)d schedules were not triggered: %(reasons)s", "count"))

    # -- helpers -----------------------------------------------------------------------------

    def _confirm(self, request: HttpRequest, queryset: Any, from_action: bool, kind: str,
                 plan: Callable[[list[Schedule]], list[actions.PlanItem]],
                 perform: Callable[[list[int]], actions.Report], *, title: Any, done: Any,
                 refusal: Any) -> HttpResponse | None:
        selected = list(queryset.only(*actions.SCHEDULE_FIELDS).order_by("name")[:actions.ACTION_LIMIT + 1])
        if len(selected) > actions.ACTION_LIMIT:
            self.message_user(request, _("Select at most %(limit)d schedules at a time; filter the list further.")
                              % {"limit": actions.ACTION_LIMIT}, messages.ERROR)
            return None
        if request.method == "POST" and request.POST.get("post") == "yes":
            report = perform([s.pk for s in selected])
            self._log(request, report.changed)
            n = len(report.changed)
            message = done % {"count": n, "outcome": actions.outcome(report.totals) if report.totals else ""}
            self._report(request, message if n else "", report.refused, refusal)
            return None
        items = plan(selected)
        changing = sum(1 for item in items if item.changes)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title % {"count": changing},
            "subtitle": None,
            "kind": kind,
            "items": items,
            "changing": changing,
            "schedules": selected,
            "from_action": from_action,
            "action_name": f"{kind}_selected",
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "form_url": request.get_full_path(),
            "single": None if from_action else selected[0],
            "default_reason": f"paused by {operator(request)}",
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, TEMPLATE, context)

    def _log(self, request: HttpRequest, changed: Sequence[tuple[int, str]]) -> None:
        """One ``LogEntry`` per changed schedule: who, what, when (shown in the schedule's history)."""
        found = {s.pk: s for s in actions.rows(pk for pk, _ in changed)}
        for pk, message in changed:
            if pk in found:
                LogEntry.objects.log_actions(user_id=request.user.pk, queryset=[found[pk]], action_flag=CHANGE,
                                             change_message=message, single_object=True)

    def _report(self, request: HttpRequest, done: str, refused: Sequence[tuple[int, str]],
                refusal: Any) -> None:
        if done:
            self.message_user(request, done, messages.SUCCESS)
        if refused:
            reasons = "; ".join(reason for _, reason in refused[:5]) + ("; …" if len(refused) > 5 else "")
            self.message_user(request, refusal % {"count": len(refused), "reasons": reasons}, messages.WARNING)
        if not done and not refused:
            self.message_user(request, _("Nothing was selected; nothing changed."), messages.INFO)
