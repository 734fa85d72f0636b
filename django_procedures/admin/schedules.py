"""``ScheduleAdmin``: schedules with their metrics; the definition form; pause, resume, trigger-now and delete.

The form edits a schedule's definition only: its metrics, pending ticks and
pause state are read-only here (pause and resume are actions with their own
permissions), and saving goes through ``store.schedules.save_schedule``.
Deleting goes through ``store.operations.delete_schedule`` (Django's
``delete_selected`` and its delete page are replaced: a plain delete would
leave the schedule's runs holding slots of nothing).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

import django_procedures.admin.display as display
from django_procedures import registry
from django_procedures.admin.bulk import BulkConfirmations, operator
from django_procedures.admin.changelist import QueryStringGuard
from django_procedures.admin.redaction import NoJsonLookups, redaction_for
from django_procedures.admin.schedule_confirm import DELETE, PAUSE, RESUME, TRIGGER
from django_procedures.admin.why import duration, first_line, timestamp
from django_procedures.exceptions import UnknownProcedureType
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.policy.ids import short_id
from django_procedures.store import operations
from django_procedures.store import schedules as store

TEMPLATES = "admin/django_procedures/schedule"
RECENT_RUNS = 10
DEFINITION = ("name", "procedure", "state", "mode", "period", "cron", "timezone", "initial_delay", "max_concurrency",
              "missed", "max_pending", "max_run_time", "queue")
STATUS = ("status", "next_tick_detail", "last_tick", "last_error", "last_error_when", "from_code", "updated")
#: Columns the confirmation pages and the admin log read.
SCHEDULE_FIELDS = ("id", "name", "procedure", "mode", "period", "cron", "timezone", "max_concurrency", "missed",
                   "max_pending", "enabled", "disabled_reason", "next_tick_at", "active_runs", "pending_ticks",
                   "from_code")


def moment(value: Any) -> str:
    """A time as the procedure pages show it, ``2026-12-01 02:10:00 UTC`` in the current time zone; ``—`` for none."""
    return "—" if value is None else timestamp(timezone.localtime(value))


class ScheduleForm(forms.ModelForm):
    """The definition; ``procedure`` offers the registered type names (an unknown one is reported)."""

    class Meta:
        model = Schedule
        fields = (*DEFINITION, "enabled")
        help_texts = {
            "period": _("As [days] hh:mm:ss, e.g. 00:05:00 for every five minutes. Leave empty to use a cron "
                        "expression instead (rate modes only)."),
            "cron": _("Five fields, minute hour day-of-month month day-of-week, e.g. 0 3 * * * for 03:00 daily."),
            "timezone": _("The IANA zone a cron expression is read in, e.g. Europe/Berlin; empty for TIME_ZONE."),
            "max_concurrency": _("1 for fixed delay and fixed rate; 2 or more for fixed rate overlap."),
            "max_pending": _("catch up only: how many missed ticks to keep (1 or more)."),
            "queue": _("Empty for the procedure class's queue."),
            "enabled": _("Unticked, the schedule is created paused."),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "procedure" in self.fields:
            names = registry.type_names()
            current = self.instance.procedure
            choices = [("", "---------"), *((n, n) for n in names)]
            if current and current not in names:
                choices.append((current, f"{current} (not registered in this process)"))
            self.fields["procedure"].widget = forms.Select(choices=choices)

        if self.instance.pk and "state" in self.fields:
            # Shown masked as its runs' state is; a value left masked keeps the stored secret on save.
            self.initial["state"] = redaction_for(self.instance.procedure).apply(self.instance.state)

    def clean_procedure(self) -> Any:
        procedure = self.cleaned_data["procedure"]  # a required field: only called with a value
        try:
            registry.get(procedure)
        except UnknownProcedureType as error:
            raise forms.ValidationError(str(error)) from None
        return procedure

    def clean_state(self) -> Any:
        state = self.cleaned_data.get("state")
        if self.instance.pk and state is not None:
            state = redaction_for(self.instance.procedure).restore(state, self.instance.state)
        return {} if state is None else state  # left empty: no state

    def clean_initial_delay(self) -> Any:
        delay = self.cleaned_data.get("initial_delay")
        return timedelta(0) if delay is None else delay  # left empty: none


class ScheduleAdmin(QueryStringGuard, NoJsonLookups, BulkConfirmations, admin.ModelAdmin):
    """Operators read schedules' metrics here, edit definitions, and pause, resume or trigger them."""

    form = ScheduleForm
    # What needs a look first (pause reason or error, failures, drift), the plain counts after: at 1440 px with
    # both sidebars open, the counts are what scrolls out of sight, not those.
    list_display = ("name", "procedure", "mode_label", "cadence", "next_tick", "status", "failures", "last_drift",
                    "active_pending", "runs", "skips", "overlaps")
    list_filter = ("mode", "enabled")
    search_fields = ("name", "procedure")
    search_help_text = _("Part of a schedule's name or of its procedure type.")
    ordering = ("name",)
    list_per_page = 100
    show_facets = admin.ShowFacets.NEVER
    # delete_selected is ours (through the store), replacing Django's plain ORM delete of the same name.
    actions = ("pause_selected", "resume_selected", "trigger_selected", "delete_selected")
    action_fields = SCHEDULE_FIELDS
    action_ordering = ("name",)
    change_form_template = f"{TEMPLATES}/change_form.html"
    empty_value_display = "—"  # as the procedure pages show a time or value that is not there

    class Media:
        css = {"all": ("django_procedures/admin.css",)}

    # -- permissions: one per action ---------------------------------------------------------

    # Each action needs the view permission as well as its own: its confirmation page shows the schedules.

    def has_pause_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_view_or_change_permission(request) and request.user.has_perm(
            f"{self.opts.app_label}.pause_schedule")

    def has_resume_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_view_or_change_permission(request) and request.user.has_perm(
            f"{self.opts.app_label}.resume_schedule")

    def has_trigger_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_view_or_change_permission(request) and request.user.has_perm(
            f"{self.opts.app_label}.trigger_schedule")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_view_or_change_permission(request) and super().has_delete_permission(request, obj)

    # -- the list ----------------------------------------------------------------------------

    @admin.display(description=_("mode"), ordering="mode")
    def mode_label(self, s: Schedule) -> str:
        if s.mode == "fixed_delay":
            return s.get_mode_display()
        return format_html('{}<span class="proc-muted proc-reason">{}</span>', s.get_mode_display(),
                           _("missed: %(policy)s") % {"policy": s.get_missed_display()})

    @admin.display(description=_("cadence"))
    def cadence(self, s: Schedule) -> str:
        if not s.cron:
            return display.cadence(s.period, "", "")
        zone = s.timezone or settings.TIME_ZONE  # the zone the expression is read in, on a line of its own
        return format_html('<span title="{}">{}</span><span class="proc-muted proc-reason">{}</span>',
                           display.cadence(None, s.cron, zone), display.cadence(None, s.cron, ""), zone)

    @admin.display(description=_("next tick"), ordering="next_tick_at")
    def next_tick(self, s: Schedule) -> str:
        if not s.enabled:
            return format_html('<span class="proc-muted">{}</span>', _("paused"))
        if s.next_tick_at is None:
            return format_html('<span class="proc-muted">{}</span>', _("when its run finishes"))
        return format_html('<span title="{}">{}</span>{}', moment(s.next_tick_at),
                           display.relative(s.next_tick_at, timezone.now()), overdue_flag(s, timezone.now()))

    @admin.display(description=_("active · pending"), ordering="active_runs")
    def active_pending(self, s: Schedule) -> str:
        """Runs holding a slot now, and ticks waiting for one."""
        return format_html('<span title="{}">{} · {}</span>', _("active runs · pending ticks"), s.active_runs,
                           len(s.pending_ticks))

    @admin.display(description=_("drift (ms)"), ordering="last_drift_ms")
    def last_drift(self, s: Schedule) -> str:
        return "—" if s.last_drift_ms is None else f"{s.last_drift_ms:,}"

    @admin.display(description=_("enabled"), ordering="enabled")
    def status(self, s: Schedule) -> str:
        if s.enabled:
            state = format_html('<span class="proc-badge proc-done">{}</span>', _("enabled"))
        else:
            state = format_html('<span class="proc-badge proc-cancelled">{}</span> <span class="proc-muted '
                                'proc-reason" title="{}">{}</span>', _("paused"), s.disabled_reason,
                                first_line(s.disabled_reason, 60))
        if not s.last_error:
            return state
        return format_html('{} <span class="proc-badge proc-failed sched-error" title="{}">{}</span>'
                           '<span class="proc-error proc-reason">{}</span>', state, s.last_error, _("cannot tick"),
                           first_line(s.last_error, 80))

    # -- the schedule page: status, metrics and recent runs first, then the definition ------------

    def _fieldsets(self, obj: Any = None) -> list[tuple[Any, dict[str, Any]]]:
        if obj is None:
            return [(_("Definition"), {"fields": DEFINITION}), (_("Start"), {"fields": ("enabled",)})]
        return [
            (_("Status"), {"fields": STATUS}),
            (_("Metrics"), {"fields": ("metrics",)}),
            (_("Recent runs"), {"fields": ("recent_runs",)}),
            (_("Definition"), {"fields": DEFINITION}),
            (_("Snapshot"), {"fields": ("snapshot",), "classes": ("collapse",)}),
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        if obj is None:
            return ()
        fixed = ("name",) if obj.from_code else ()  # renamed, the next sync would create it again
        return (*fixed, *STATUS, "metrics", "recent_runs", "snapshot", "masked_state")

    def get_fieldsets(  # type: ignore[override]  # plain dicts, which Django takes; the stubs want a TypedDict
            self, request: HttpRequest, obj: Any = None) -> list[tuple[Any, dict[str, Any]]]:
        """Read-only, the state is shown masked (the form, for an editor, masks it itself)."""
        fieldsets = self._fieldsets(obj)
        if obj is None or self.has_change_permission(request, obj):
            return fieldsets
        return [(title, {**options, "fields": tuple("masked_state" if f == "state" else f for f in options["fields"])})
                for title, options in fieldsets]

    @admin.display(description=_("state"))
    def masked_state(self, s: Schedule) -> str:
        redaction = redaction_for(s.procedure)
        return format_html('<pre class="proc-block" id="sched-state">{}</pre><p class="proc-muted">{}</p>',
                           display.pretty_json(redaction.apply(s.state)), redaction.note)

    @admin.display(description=_("next tick"))
    def next_tick_detail(self, s: Schedule) -> str:
        if s.next_tick_at is None or not s.enabled:
            return self.next_tick(s)
        now = timezone.now()
        return format_html("{} ({}){}", moment(s.next_tick_at), display.relative(s.next_tick_at, now),
                           overdue_flag(s, now))

    # Every time on the page in one format, the procedure pages' (Django's default renders these three as
    # "Dec. 1, 2026, 2:05 a.m." beside "2026-12-01 02:10:00 UTC").

    @admin.display(description=_("last tick at"))
    def last_tick(self, s: Schedule) -> str:
        return moment(s.last_tick_at)

    @admin.display(description=_("last error at"))
    def last_error_when(self, s: Schedule) -> str:
        return moment(s.last_error_at)

    @admin.display(description=_("updated at"))
    def updated(self, s: Schedule) -> str:
        return moment(s.updated_at)

    @admin.display(description=_("counts"))
    def metrics(self, s: Schedule) -> str:
        def ms(value: int | None) -> str:
            return "—" if value is None else f"{value:,}"

        cards = [("active_runs", s.active_runs, _("active runs")), ("pending_runs", len(s.pending_ticks),
                 _("pending ticks")), ("runs", s.runs, _("runs")), ("skips", s.skips, _("skips")),
                 ("overlaps", s.overlaps, _("overlaps")), ("failures", s.failures, _("failures")),
                 ("last_drift_ms", ms(s.last_drift_ms), _("last drift (ms)")),
                 ("last_elapsed_ms", ms(s.last_elapsed_ms), _("last run time (ms)")),
                 ("max_elapsed_ms", ms(s.max_elapsed_ms), _("longest run time (ms)"))]
        return format_html('<div class="proc-cards" id="sched-metrics">{}</div>', format_html_join(
            "", '<div class="proc-card" data-metric="{}"><span class="proc-count">{}</span>{}</div>', cards))

    @admin.display(description=_("state"))
    def snapshot(self, s: Schedule) -> str:
        return format_html('<pre class="proc-block" id="sched-snapshot">{}</pre>', display.pretty_json(s.snapshot()))

    @admin.display(description=_("runs, newest first"))
    def recent_runs(self, s: Schedule) -> str:
        runs = list(ProcedureRun.objects.filter(schedule=s).order_by("-created_at", "-id")
                    .only("id", "type_name", "status", "tick_at", "created_at", "started_at", "finished_at", "error")
                    [:RECENT_RUNS])
        link = format_html('<a id="sched-runs-link" href="{}">{}</a>', runs_url(self.admin_site.name, s.pk),
                           _("All runs of this schedule in the procedures list"))
        if not runs:
            return format_html('<p class="proc-muted">{}</p><p>{}</p>', _("No run yet."), link)
        now = timezone.now()
        rows = format_html_join("", '<tr><td><span class="proc-badge proc-{}">{}</span></td><td><a href="{}">{}</a>'
                                '</td><td>{}</td><td>{}</td><td class="proc-error">{}</td></tr>', (
            (r.status, r.get_status_display(),
             reverse(f"{self.admin_site.name}:django_procedures_procedurerun_change", args=[r.pk]), short_id(r.id),
             moment(r.tick_at), display.run_duration(r.started_at, r.finished_at, now),
             first_line(r.error, 80)) for r in runs))
        return format_html('<table id="sched-runs"><thead><tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th>'
                           '</tr></thead><tbody>{}</tbody></table><p>{}</p>', _("status"), _("procedure"), _("tick"),
                           _("duration"), _("error"), rows, link)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        pk = unquote(object_id)
        extra = {
            "can_pause": self.has_pause_permission(request),
            "can_resume": self.has_resume_permission(request),
            "can_trigger": self.has_trigger_permission(request),
            "pause_url": reverse(self._url_name("pause"), args=[pk]),
            "resume_url": reverse(self._url_name("resume"), args=[pk]),
            "trigger_url": reverse(self._url_name("trigger"), args=[pk]),
            "show_delete": self.has_button_permission(request, DELETE),  # view and delete, as the action
            "runs_url": runs_url(self.admin_site.name, pk),
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, extra)

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        """Through the store: a new schedule gets its first tick; an edit writes only the definition."""
        store.save_schedule(obj)

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        """Through the store: unfinished runs cancelled, finished runs kept (never a plain ORM delete)."""
        operations.delete_schedule(obj.pk, by=operator(request))

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for pk in queryset.values_list("pk", flat=True):
            operations.delete_schedule(pk, by=operator(request))

    def delete_view(self, request: HttpRequest, object_id: str,
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The page's Delete link: the same confirmation as the action, then back to the list."""
        if not self.has_button_permission(request, DELETE):
            raise PermissionDenied
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(f"no schedule has the id {object_id}")
        response = self.confirm(request, self.get_queryset(request).filter(pk=obj.pk), DELETE, from_action=False)
        return response or HttpResponseRedirect(reverse(self._url_name("changelist")))

    # -- actions and buttons -----------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("<path:object_id>/pause/", wrap(self.pause_view), name=f"{prefix}_pause"),
            path("<path:object_id>/resume/", wrap(self.resume_view), name=f"{prefix}_resume"),
            path("<path:object_id>/trigger/", wrap(self.trigger_view), name=f"{prefix}_trigger"),
            *super().get_urls(),
        ]

    @admin.action(description=_("Pause selected schedules"), permissions=["pause"])
    def pause_selected(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self.confirm(request, queryset, PAUSE, from_action=True)

    @admin.action(description=_("Resume selected schedules"), permissions=["resume"])
    def resume_selected(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self.confirm(request, queryset, RESUME, from_action=True)

    @admin.action(description=_("Delete selected schedules…"), permissions=["delete"])
    def delete_selected(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self.confirm(request, queryset, DELETE, from_action=True)

    @admin.action(description=_("Trigger selected schedules now"), permissions=["trigger"])
    def trigger_selected(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self.confirm(request, queryset, TRIGGER, from_action=True)

    def pause_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self.button_view(request, object_id, PAUSE)

    def resume_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self.button_view(request, object_id, RESUME)

    def trigger_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self.button_view(request, object_id, TRIGGER)


def overdue_flag(s: Schedule, now: Any) -> str:
    """A badge once the schedule is more than two ticks behind: nothing is ticking it (see docs/schedules.md)."""
    lag = s.overdue(now)
    if lag is None:
        return ""
    return format_html(' <span class="proc-badge proc-failed sched-overdue" title="{}">{}</span>', _(
        "Not ticked for %(lag)s, more than two ticks: is a procedures_worker --with-scheduler or Celery beat "
        "running?") % {"lag": duration(lag.total_seconds())}, _("overdue"))


def runs_url(site: str, pk: Any) -> str:
    """The procedures list filtered to one schedule's runs (newest first, from ``procedures_schedule_idx``)."""
    return reverse(f"{site}:django_procedures_procedurerun_changelist") + f"?schedule__id__exact={pk}"
