"""What keeps the procedures list fast on a table of millions (no full count, a cheap date hierarchy) and safe."""

from __future__ import annotations

import calendar
import datetime
from typing import Any

from django.contrib import messages
from django.contrib.admin.views.main import ORDER_VAR, ChangeList
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Max, Min, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils import formats, timezone
from django.utils.functional import cached_property
from django.utils.text import capfirst
from django.utils.translation import gettext as _

from django_procedures.admin.progress import children_done
from django_procedures.admin.reads import ROW_FIELDS
from django_procedures.policy.status import RunStatus
from django_procedures.store.overview import newest_matches_first

#: Rows a filtered count reads at most; above it the list says "more than 10,000".
COUNT_CAP = 10_000


def estimated_rows(queryset: QuerySet[Any]) -> int | None:
    """PostgreSQL's estimate of the rows in the queryset's table (``pg_class.reltuples``), if it has one."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                       [connection.ops.quote_name(queryset.model._meta.db_table)])
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None and row[0] >= 0 else None


class EstimatedCountPaginator(Paginator):
    """A paginator that never counts a whole big table.

    Unfiltered on PostgreSQL it takes the planner's estimate; otherwise it
    counts at most ``COUNT_CAP + 1`` rows (``SELECT count(*) FROM (... LIMIT
    10001)``). ``count_kind`` says which: ``exact``, ``estimate`` or ``at_least``.
    """

    cap = COUNT_CAP

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.count_kind = "exact"

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        if not queryset.query.where:
            estimate = estimated_rows(queryset)
            if estimate is not None and estimate > self.cap:
                self.count_kind = "estimate"
                return estimate
        counted = queryset.order_by()[: self.cap + 1].count()
        if counted > self.cap:
            self.count_kind = "at_least"
        return counted

    @property
    def count_label(self) -> str:
        """The count as the list shows it: ``42``, ``about 1,000,000`` or ``more than 10,000``."""
        count = self.count
        if self.count_kind == "estimate":
            return _("about %(count)s") % {"count": f"{count:,}"}
        if self.count_kind == "at_least":
            return _("more than %(count)s") % {"count": f"{self.cap:,}"}
        return f"{count:,}"


class QueryStringGuard:
    """Mixin for a ``ModelAdmin``: a filter or search holding a NUL character is dropped with a message.

    No column can hold NUL (PostgreSQL refuses it in text), so such a term matches
    nothing; passed on, it would make the database raise and the list answer 500.
    """

    message_user: Any

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        bad = [name for name, values in request.GET.lists() if "\x00" in name or any("\x00" in v for v in values)]
        if not bad:
            return super().changelist_view(request, extra_context)  # type: ignore[misc]
        self.message_user(request, _("A filter or search cannot contain a NUL character; it was dropped: %(names)s")
                          % {"names": ", ".join(repr(name) for name in bad)}, messages.WARNING)
        kept = request.GET.copy()
        for name in bad:
            del kept[name]
        return HttpResponseRedirect(f"{request.path}?{kept.urlencode()}" if kept else request.path)


#: Set on the request by the search when it reads the term as words of the error (and of no type name).
_ERROR_WORDS = "_procedures_error_words"


def mark_error_words(request: HttpRequest) -> None:
    """Note that this request's search matches words of the error only (see :func:`newest_matches_first`)."""
    setattr(request, _ERROR_WORDS, True)


class ProcedureChangeList(ChangeList):
    """The list reads only the columns it shows: never state, output or traceback."""

    def get_queryset(self, request: Any, exclude_parameters: Any = None) -> QuerySet[Any]:
        return super().get_queryset(request, exclude_parameters).only(*ROW_FIELDS)

    def get_results(self, request: Any) -> None:
        super().get_results(request)
        if (getattr(request, _ERROR_WORDS, False) and ORDER_VAR not in self.params
                and getattr(self.paginator, "count_kind", "") == "at_least"
                and connections[self.queryset.db].vendor == "postgresql"):
            self.result_list = newest_matches_first(self.result_list)
        # A waiting parent shows how many of its children are done: one query for the whole page.
        counts = children_done(r.id for r in self.result_list if r.status == RunStatus.WAITING)
        for run in self.result_list:
            run.children_counts = counts.get(run.id)


def date_hierarchy(cl: Any) -> dict[str, Any]:
    """Django's date drill-down, with choices spanning the first to the last date instead of a DISTINCT.

    Django lists the years (months, days) that have rows with a ``SELECT
    DISTINCT date_trunc(...)`` over every matching row; here one ``MIN``/``MAX``
    (two index probes) bounds the range and every period in it is offered.
    Hidden while searching: words of the error are found by a scan, and
    bounding the matches would scan them once more.
    """
    field_name = cl.date_hierarchy
    year_field, month_field, day_field = (f"{field_name}__{part}" for part in ("year", "month", "day"))
    year, month, day = (cl.params.get(name) for name in (year_field, month_field, day_field))

    def link(filters: dict[str, Any]) -> str:
        return cl.get_query_string(filters, [f"{field_name}__"])

    if cl.query:
        return {"show": False}  # bounding a search's matches would be one more scan of them
    if year and month and day:
        chosen = datetime.date(int(year), int(month), int(day))
        return {"show": True,
                "back": {"link": link({year_field: year, month_field: month}),
                         "title": capfirst(formats.date_format(chosen, "YEAR_MONTH_FORMAT"))},
                "choices": [{"title": capfirst(formats.date_format(chosen, "MONTH_DAY_FORMAT"))}]}
    bounds = cl.queryset.order_by().aggregate(first=Min(field_name), last=Max(field_name))
    first, last = bounds["first"], bounds["last"]
    if first is None or last is None:
        return {"show": False}
    first, last = timezone.localtime(first), timezone.localtime(last)
    if not (year or month) and first.year == last.year:
        year = str(first.year)
        if first.month == last.month:
            month = str(first.month)
    if year and month:
        y, m = int(year), int(month)
        days = [datetime.date(y, m, d) for d in range(1, calendar.monthrange(y, m)[1] + 1)
                if first.date() <= datetime.date(y, m, d) <= last.date()]
        return {"show": True, "back": {"link": link({year_field: year}), "title": str(year)},
                "choices": [{"link": link({year_field: year, month_field: month, day_field: d.day}),
                             "title": capfirst(formats.date_format(d, "MONTH_DAY_FORMAT"))} for d in days]}
    if year:
        y = int(year)
        months = [datetime.date(y, m, 1) for m in range(1, 13)
                  if (first.year, first.month) <= (y, m) <= (last.year, last.month)]
        return {"show": True, "back": {"link": link({}), "title": _("All dates")},
                "choices": [{"link": link({year_field: year, month_field: d.month}),
                             "title": capfirst(formats.date_format(d, "YEAR_MONTH_FORMAT"))} for d in months]}
    return {"show": True, "back": None,
            "choices": [{"link": link({year_field: str(y)}), "title": str(y)}
                        for y in range(first.year, last.year + 1)]}
