"""``LimitUseAdmin``: the Limits page, flow-control limits in use fleet-wide, read-only."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from django_procedures.admin.view_only import ViewOnlyAdmin
from django_procedures.models import LimitUse


class LimitUseAdmin(ViewOnlyAdmin):
    """Rows are written by the claims and the lease endings, and removed by the sweep once they count nothing."""

    list_display = ("name", "use", "recent_claims", "waiting_queues")
    search_fields = ("name",)
    ordering = ("-in_use", "name")
    list_per_page = 100

    def get_queryset(self, request: HttpRequest) -> QuerySet[LimitUse]:
        return super().get_queryset(request).defer("times")  # (a rate's log: up to its count of timestamps)

    @admin.display(description=_("in use"), ordering="in_use")
    def use(self, row: LimitUse) -> str:
        """``"5 of 5 running"``, as the procedure page's why-not-running says it."""
        return f"{row.in_use} of {row.max} running" if row.max else f"{row.in_use} running"

    @admin.display(description=_("rate window"))
    def recent_claims(self, row: LimitUse) -> str:
        return f"per {row.per:g}s" if row.per else "—"

    @admin.display(description=_("waiting in queues"))
    def waiting_queues(self, row: LimitUse) -> str:
        return ", ".join(row.waiting) if row.waiting else "—"
