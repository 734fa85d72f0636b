"""``WorkerAdmin``: worker processes as alive, gone (stopped renewing without a word) or stopped, and their work."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from django_procedures.admin.display import relative
from django_procedures.admin.view_only import ViewOnlyAdmin
from django_procedures.admin.why import timestamp
from django_procedures.models import Worker
from django_procedures.policy.workers import WorkerState
from django_procedures.store.overview import running_by_worker

#: Procedures listed per worker in the list; the rest are counted.
SHOWN = 3


class WorkerStateFilter(admin.SimpleListFilter):
    title = _("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(s.value, s.value) for s in WorkerState]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Worker]) -> QuerySet[Worker]:
        value = self.value()
        if value == WorkerState.ALIVE:
            return queryset.alive()  # type: ignore[attr-defined]
        if value == WorkerState.GONE:
            return queryset.gone()  # type: ignore[attr-defined]
        if value == WorkerState.STOPPED:
            return queryset.stopped()  # type: ignore[attr-defined]
        return queryset


class WorkerAdmin(ViewOnlyAdmin):
    """Read-only: rows are written by the workers and removed by ``procedures_prune``."""

    list_display = ("worker_id", "state_badge", "running_now", "hostname", "pid", "queue_list", "concurrency",
                    "with_scheduler", "version", "started", "last_seen")
    list_filter = (WorkerStateFilter, "hostname")
    search_fields = ("worker_id", "hostname")
    ordering = ("-last_seen_at",)
    list_per_page = 50

    class Media:
        css = {"all": ("django_procedures/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        return super().get_queryset(request).with_state()  # type: ignore[attr-defined]

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        # One query for the whole page; stopped workers run nothing (their id may be reused by a live one).
        live = [w.worker_id for w in changelist.result_list if w.state != WorkerState.STOPPED]
        self._running = running_by_worker(live)
        return changelist

    @admin.display(description=_("state"), ordering="stopped_at")
    def state_badge(self, worker: Worker) -> str:
        """The state; a stopped worker adds why and when (one date format with the other columns)."""
        state = worker.state  # type: ignore[attr-defined]
        badge = format_html('<span class="proc-badge proc-worker-{}">{}</span>', state, state)
        if worker.stopped_at is None:
            return badge
        detail = f": {worker.stop_detail}" if worker.stop_detail else ""
        return format_html('{} <span class="proc-reason" title="{}">{}{} · {}</span>', badge, worker.stop_detail,
                           worker.get_stop_reason_display(), detail[:80], timestamp(worker.stopped_at))

    @admin.display(description=_("running now"))
    def running_now(self, worker: Worker) -> str:
        if worker.state == WorkerState.STOPPED:  # type: ignore[attr-defined]
            return "—"
        held = getattr(self, "_running", None)
        if held is None:  # the change page: no list to share a query with
            held = running_by_worker([worker.worker_id])
        rows = held.get(worker.worker_id, [])
        if not rows:
            return "—" if worker.state == WorkerState.GONE else str(_("idle"))  # type: ignore[attr-defined]
        links = format_html_join(", ", '<a href="{}">{}</a> · {}', (
            (reverse("admin:django_procedures_procedurerun_change", args=[r["id"]]),
             r["type_name"].rsplit(".", 1)[-1], r["step_name"] or r["status"]) for r in rows[:SHOWN]))
        more = len(rows) - SHOWN
        return format_html("{}{}", links, f" (+{more})" if more > 0 else "")

    @admin.display(description=_("queues"))
    def queue_list(self, worker: Worker) -> str:
        return ", ".join(worker.queues) if worker.queues else str(_("every queue"))

    @admin.display(description=_("started"), ordering="started_at")
    def started(self, worker: Worker) -> str:
        return timestamp(worker.started_at)

    @admin.display(description=_("last seen"), ordering="last_seen_at")
    def last_seen(self, worker: Worker) -> str:
        """How long ago it last renewed its row (database clock at write; this process's clock now)."""
        return format_html('<span title="{}">{}</span>', timestamp(worker.last_seen_at),
                           relative(worker.last_seen_at, timezone.now()))
