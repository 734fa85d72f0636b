"""``ProcedureRunAdmin``: the procedures list, the read-only procedure page, retry and cancel."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

import django_procedures.admin.display as display
import django_procedures.admin.progress as progress
import django_procedures.admin.send_event as send_event
from django_procedures import registry
from django_procedures.admin.bulk import BulkConfirmations
from django_procedures.admin.changelist import (
    EstimatedCountPaginator,
    ProcedureChangeList,
    QueryStringGuard,
    mark_error_words,
)
from django_procedures.admin.confirm import CANCEL, RETRY
from django_procedures.admin.dashboard import dashboard_context
from django_procedures.admin.filters import LIST_FILTER, distinct_values
from django_procedures.admin.page import page_context
from django_procedures.admin.reads import ROW_FIELDS, step_total
from django_procedures.admin.redaction import NoJsonLookups
from django_procedures.admin.rerun import RERUN, links
from django_procedures.admin.view_only import ViewOnlyAdmin
from django_procedures.admin.why import first_line, sleeping_until, waiting_for_events
from django_procedures.models import ProcedureRun
from django_procedures.policy import ids
from django_procedures.policy.status import FINAL, RunStatus

TEMPLATES = "admin/django_procedures/procedurerun"


class ProcedureRunAdmin(QueryStringGuard, NoJsonLookups, BulkConfirmations, ViewOnlyAdmin):
    """Operators read procedures here and retry or cancel them; nobody edits a procedure's columns."""

    # The last error right after where it happened: on a narrow screen the numbers at the end scroll, not it.
    # The last error last: it takes the room the others leave (ending in an ellipsis), so attempts, age and
    # duration stay on a 1440 px screen however long the error.
    list_display = ("short_id", "status_badge", "type_name", "queue", "current_step", "progress_bar", "attempts",
                    "age", "duration", "last_error")
    list_display_links = ("short_id",)
    list_filter = LIST_FILTER
    search_fields = ("key",)  # shows the search box; get_search_results decides what a term matches
    search_help_text = _("A procedure id, an idempotency key, part of a type name, or words of the error.")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    sortable_by = ("age",)
    list_per_page = 50
    list_max_show_all = 200
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    actions = ("retry_selected", "cancel_selected", "rerun_selected")
    action_fields = ROW_FIELDS
    action_ordering = ("-created_at", "-id")
    change_list_template = f"{TEMPLATES}/change_list.html"

    class Media:
        css = {"all": ("django_procedures/admin.css",)}

    # -- permissions: read-only, plus the two actions ----------------------------------------

    # Read-only (ViewOnlyAdmin): finished trees are removed by procedures_prune, never one row at a time.

    # Each action needs the view permission as well as its own: its confirmation page shows the procedures.

    def has_retry_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_view_permission(request) and request.user.has_perm(f"{self.opts.app_label}.retry_procedurerun")

    def has_cancel_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_view_permission(request) and request.user.has_perm(
            f"{self.opts.app_label}.cancel_procedurerun")

    def has_rerun_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_view_permission(request) and request.user.has_perm(
            f"{self.opts.app_label}.rerun_procedurerun")

    # -- the list ----------------------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ProcedureChangeList]:
        return ProcedureChangeList

    def get_search_results(self, request: HttpRequest, queryset: Any, search_term: str) -> tuple[Any, bool]:
        """The narrowest reading of the term that matches, each served by an index.

        An id; else an existing idempotency key; else an exact type name; else
        the types whose name contains the term, or words of the error of a
        procedure that is not done (``done`` clears the error, so only the
        status index's other ranges are read).
        """
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            return queryset.filter(id=uuid.UUID(term)), False
        except ValueError:
            pass
        if ProcedureRun.objects.filter(key=term).exists():
            return queryset.filter(key=term), False
        known = set(registry.type_names()) | set(distinct_values(queryset, "type_name"))
        if term in known:
            return queryset.filter(type_name=term), False
        # ``error <> ''`` (always true of a match) lets PostgreSQL use the trigram index, which holds only errors.
        found = Q(status__in=[s for s in RunStatus if s != RunStatus.DONE], error__icontains=term) & ~Q(error="")
        types = sorted(t for t in known if term.lower() in t.lower())
        if types:
            return queryset.filter(found | Q(type_name__in=types)), False
        mark_error_words(request)
        return queryset.filter(found), False

    @admin.display(description=_("id"))
    def short_id(self, run: ProcedureRun) -> str:
        return ids.short_id(run.id)

    @admin.display(description=_("status"))
    def status_badge(self, run: ProcedureRun) -> str:
        badge = format_html('<span class="proc-badge proc-{}">{}</span>', run.status, run.get_status_display())
        if run.status == RunStatus.WAITING and run.waiting_for == "timer" and run.wake_at is not None:
            return format_html('{} <span class="proc-oneline">{}</span>', badge,
                               sleeping_until(run.wake_at, timezone.now()))
        if run.status == RunStatus.WAITING and run.waiting_for == "event":
            return format_html('{} <span class="proc-oneline">{}</span>', badge,
                               waiting_for_events(run.waiting_events or [], run.wake_at, timezone.now()))
        return badge

    @admin.display(description=_("step"))
    def current_step(self, run: ProcedureRun) -> str:
        total, machine = step_total(run.type_name)
        return display.step_label(run.step, run.step_name, total, machine=machine,
                                  in_rollback=run.in_rollback and run.status not in FINAL)

    @admin.display(description=_("progress"))
    def progress_bar(self, run: ProcedureRun) -> str:
        return progress.list_cell(run)

    @admin.display(description=_("attempts"))
    def attempts(self, run: ProcedureRun) -> str:
        made = display.attempts_made(run.status, run.attempt)
        return format_html('<span title="{} failed, {} lost with their worker">{}</span>', run.failures,
                           run.lost, "—" if made is None else made)

    @admin.display(description=_("age"), ordering="created_at")
    def age(self, run: ProcedureRun) -> str:
        return display.age(run.created_at, timezone.now())

    @admin.display(description=_("duration"))
    def duration(self, run: ProcedureRun) -> str:
        return display.run_duration(run.started_at, run.finished_at, timezone.now())

    @admin.display(description=_("last error"))
    def last_error(self, run: ProcedureRun) -> str:
        if not run.error:
            return ""
        return format_html('<span class="proc-error proc-oneline" title="{}">{}</span>', run.error[:500],
                           first_line(run.error, 90))

    # -- the procedure page (read-only) ------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        return [
            path("dashboard/", wrap(self.dashboard_view), name=f"{prefix}_dashboard"),
            path("<path:object_id>/retry/", wrap(self.retry_view), name=f"{prefix}_retry"),
            path("<path:object_id>/cancel/", wrap(self.cancel_view), name=f"{prefix}_cancel"),
            path("<path:object_id>/rerun/", wrap(self.rerun_view), name=f"{prefix}_rerun"),
            path("<path:object_id>/send-event/", wrap(self.send_event_view), name=f"{prefix}_send_event"),
            *super().get_urls(),
        ]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        run = self.get_object(request, unquote(object_id))
        if run is None:
            self.message_user(request, _("No procedure has the id “%(id)s”; it may have been pruned.")
                              % {"id": object_id}, messages.WARNING)
            return HttpResponseRedirect(reverse(self._url_name("changelist")))
        if not self.has_view_or_change_permission(request, run):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            **page_context(run),
            "opts": self.opts,
            "title": f"{run.type_name} {run.id}",
            "subtitle": None,
            "can_retry": self.has_retry_permission(request, run),
            "can_cancel": self.has_cancel_permission(request, run),
            "retry_url": reverse(self._url_name("retry"), args=[run.pk]),
            "cancel_url": reverse(self._url_name("cancel"), args=[run.pk]),
            "history_url": reverse(self._url_name("history"), args=[run.pk]),
            "can_rerun": self.has_rerun_permission(request, run),
            "rerun_url": reverse(self._url_name("rerun"), args=[run.pk]),
            **links(run),
            "can_send_event": send_event.can_send_event(self, request) and not run.is_final,
            "send_event_url": reverse(self._url_name("send_event"), args=[run.pk]),
            **send_event.history_context(run),
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, f"{TEMPLATES}/procedure.html", context)

    # -- the dashboard -----------------------------------------------------------------------

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            **dashboard_context(timezone.now()),
            "opts": self.opts,
            "title": _("Procedures dashboard"),
            "changelist_url": reverse(self._url_name("changelist")),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, f"{TEMPLATES}/dashboard.html", context)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra = {"dashboard_url": reverse(self._url_name("dashboard")), **(extra_context or {})}
        return super().changelist_view(request, extra)

    # -- actions and buttons (the flow lives in admin.bulk, the work in admin.actions) -------

    @admin.action(description=_("Retry selected failed procedures"), permissions=["retry"])
    def retry_selected(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self.confirm(request, queryset, RETRY, from_action=True)

    @admin.action(description=_("Cancel selected procedures and their sub-procedures"), permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self.confirm(request, queryset, CANCEL, from_action=True)

    @admin.action(description=_("Re-run selected final procedures from a step…"), permissions=["rerun"])
    def rerun_selected(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self.confirm(request, queryset, RERUN, from_action=True)

    def rerun_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self.button_view(request, object_id, RERUN)

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self.button_view(request, object_id, RETRY)

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self.button_view(request, object_id, CANCEL)

    def send_event_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return send_event.send_event_view(self, request, object_id)
