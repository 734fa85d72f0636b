"""Confirm, then perform: the request side of the retry and cancel actions and buttons.

Django-celery-beat's pattern: the admin method asks for confirmation, the work
is a plain function (``admin.actions``), then ``message_user`` reports with
plural-aware counts and every changed procedure gets an admin log entry.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.contrib import messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from django_procedures.admin import actions
from django_procedures.admin.reads import ROW_FIELDS
from django_procedures.models import ProcedureRun

TEMPLATE = "admin/django_procedures/procedurerun/confirm_action.html"


def operator(request: HttpRequest) -> str:
    """Who did it, as ``retried_by`` and the cancel reason record it."""
    return request.user.get_username() or f"user {request.user.pk}"


class Confirmations:
    """Mixin for ``ProcedureRunAdmin``: the confirmation page and the outcome of each action."""

    # Provided by ModelAdmin, which follows this mixin in the admin's bases.
    admin_site: Any
    opts: Any
    message_user: Any

    def confirm_retry(self, request: HttpRequest, queryset: Any, *, from_action: bool) -> HttpResponse | None:
        runs = self._selected(request, queryset)
        if runs is None:
            return None
        if request.method == "POST" and request.POST.get("post") == "yes":
            report = actions.retry_procedures([r.id for r in runs], by=operator(request))
            self._log(request, report.retried, _("Retried from the admin: failed → ready, resumes from its last "
                                                 "checkpoint with a fresh retry budget."))
            n = len(report.retried)
            done = ngettext("Retried %(count)d procedure; it is ready again.",
                            "Retried %(count)d procedures; they are ready again.", n) % {"count": n}
            self._report(request, done if n else "",
                         report.refused, ngettext("%(count)d procedure was not retried: %(reasons)s",
                                                  "%(count)d procedures were not retried: %(reasons)s",
                                                  len(report.refused)))
            return None
        items = actions.plan_retry(runs)
        changing = sum(1 for item in items if item.will_retry)
        title = ngettext("Retry %(count)d procedure?", "Retry %(count)d procedures?", changing) % {"count": changing}
        return self._confirmation(request, "retry", title, runs, from_action,
                                  {"retry_items": items, "changing": changing})

    def confirm_cancel(self, request: HttpRequest, queryset: Any, *, from_action: bool) -> HttpResponse | None:
        runs = self._selected(request, queryset)
        if runs is None:
            return None
        if request.method == "POST" and request.POST.get("post") == "yes":
            report = actions.cancel_procedures([r.id for r in runs], by=operator(request))
            for selected, ids in report.cancelled.items():
                self._log(request, ids, _("Cancelled from the admin with the subtree of %(id)s.") % {"id": selected})
            n, roots = report.count, len(report.cancelled)
            done = (ngettext("Cancelled %(count)d procedure", "Cancelled %(count)d procedures", n) % {"count": n}
                    + " " + ngettext("(%(selected)d selected, with its unfinished sub-procedures).",
                                     "(%(selected)d selected, with their unfinished sub-procedures).",
                                     roots) % {"selected": roots})
            self._report(request, done if n else "", report.unchanged,
                         ngettext("%(count)d procedure was left alone: %(reasons)s",
                                  "%(count)d procedures were left alone: %(reasons)s", len(report.unchanged)))
            return None
        items = actions.plan_cancel(r.id for r in runs)
        changing = sum(len(item.members) for item in items)
        title = ngettext("Cancel %(count)d procedure?", "Cancel %(count)d procedures?", changing) % {
            "count": changing}
        return self._confirmation(request, "cancel", title, runs, from_action,
                                  {"cancel_items": items, "changing": changing})

    # -- helpers -----------------------------------------------------------------------------

    def _selected(self, request: HttpRequest, queryset: Any) -> list[ProcedureRun] | None:
        runs = list(queryset.only(*ROW_FIELDS).order_by("-created_at", "-id")[:actions.ACTION_LIMIT + 1])
        if len(runs) > actions.ACTION_LIMIT:
            self.message_user(request, _("Select at most %(limit)d procedures at a time; filter the list further.")
                              % {"limit": actions.ACTION_LIMIT}, messages.ERROR)
            return None
        return runs

    def _confirmation(self, request: HttpRequest, kind: str, title: str, runs: Sequence[ProcedureRun],
                      from_action: bool, extra: dict[str, Any]) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "subtitle": None,
            "kind": kind,
            "runs": runs,
            "from_action": from_action,
            "action_name": f"{kind}_selected",
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "form_url": request.get_full_path(),
            "single": None if from_action else runs[0],
            **extra,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, TEMPLATE, context)

    def _log(self, request: HttpRequest, ids: Sequence[uuid.UUID], message: str) -> None:
        """One ``LogEntry`` per changed procedure: who, what, when (shown in each procedure's history)."""
        if ids:
            LogEntry.objects.log_actions(user_id=request.user.pk, queryset=actions.rows(ids), action_flag=CHANGE,
                                         change_message=message)

    def _report(self, request: HttpRequest, done: str, refused: Sequence[tuple[uuid.UUID, str]],
                refusal: str) -> None:
        if done:
            self.message_user(request, done, messages.SUCCESS)
        if refused:
            reasons = "; ".join(reason for _, reason in refused[:5]) + ("; …" if len(refused) > 5 else "")
            self.message_user(request, refusal % {"count": len(refused), "reasons": reasons}, messages.WARNING)
        if not done and not refused:
            self.message_user(request, _("Nothing was selected; nothing changed."), messages.INFO)
