"""``LimitUseAdmin``: the Limits page, flow-control limits in use fleet-wide, read-only."""

from __future__ import annotations

from typing import cast

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from django_procedures import clock
from django_procedures.admin.view_only import ViewOnlyAdmin
from django_procedures.models import LimitUse
from django_procedures.models.limit import LimitUseQuerySet


class LimitUseAdmin(ViewOnlyAdmin):
    """Rows are made with a name's first slots, and removed by the sweep once nothing holds any."""

    list_display = ("name", "use", "recent_claims", "waiting_queues")
    search_fields = ("name",)
    list_per_page = 100

    def get_queryset(self, request: HttpRequest) -> QuerySet[LimitUse]:
        rows = cast(LimitUseQuerySet, super().get_queryset(request))
        return rows.with_use(clock.now()).order_by("-in_use", "name")

    @admin.display(description=_("in use"), ordering="in_use")
    def use(self, row: LimitUse) -> str:
        """``"5 of 5 running"``, as the procedure page's why-not-running says it."""
        in_use = getattr(row, "in_use", 0)
        return f"{in_use} of {row.max} running" if row.max else f"{in_use} running"

    @admin.display(description=_("rate window"))
    def recent_claims(self, row: LimitUse) -> str:
        if not row.per:
            return "—"
        return f"{getattr(row, 'recent', 0)} per {row.per:g}s"

    @admin.display(description=_("waiting in queues"))
    def waiting_queues(self, row: LimitUse) -> str:
        return ", ".join(row.waiting) if row.waiting else "—"
