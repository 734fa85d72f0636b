"""List filters that stay cheap on millions of rows: no DISTINCT over the table."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import connections
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _

from django_procedures import registry
from django_procedures.models import Schedule
from django_procedures.tasks.types import is_task_type

#: Most distinct values a filter lists.
VALUES_LIMIT = 200


def distinct_values(queryset: QuerySet[Any], column: str, limit: int = VALUES_LIMIT) -> list[str]:
    """The distinct values of an indexed column by a loose index scan: one index probe per value.

    A recursive ``MIN(column) WHERE column > previous`` walks the index from
    value to value instead of reading every row, as ``SELECT DISTINCT`` would.
    """
    connection = connections[queryset.db]
    qn = connection.ops.quote_name
    table, col = qn(queryset.model._meta.db_table), qn(column)
    sql = f"""
        WITH RECURSIVE seen(v) AS (
            SELECT MIN({col}) FROM {table}
            UNION ALL
            SELECT (SELECT MIN({col}) FROM {table} WHERE {col} > seen.v) FROM seen WHERE seen.v IS NOT NULL
        )
        SELECT v FROM seen WHERE v IS NOT NULL LIMIT %s
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [limit])
        return [row[0] for row in cursor.fetchall()]


class ValuesFilter(admin.SimpleListFilter):
    """Exact match on one indexed column, listing the values found by :func:`distinct_values`."""

    column = ""

    def extra_values(self) -> list[str]:
        return []

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        values = set(distinct_values(model_admin.get_queryset(request), self.column)) | set(self.extra_values())
        return [(v, v) for v in sorted(values)]

    def queryset(self, request: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.column: value}) if value else queryset


class TypeFilter(ValuesFilter):
    title = _("type")
    parameter_name = column = "type_name"

    def extra_values(self) -> list[str]:
        return registry.type_names()  # registered types with no procedure yet are still worth offering


class QueueFilter(ValuesFilter):
    title = _("queue")
    parameter_name = column = "queue"


class KindFilter(admin.SimpleListFilter):
    """Tasks of Django's Tasks framework (type names ``task:<function path>``) or procedures.

    Matches the task type names found by :func:`distinct_values` and those
    registered here, so the list is still read from the type index.
    """

    title = _("kind")
    parameter_name = "kind"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, Any]]:
        return [("tasks", _("Tasks")), ("procedures", _("Procedures"))]

    def queryset(self, request: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() not in ("tasks", "procedures"):
            return queryset
        names = {v for v in [*distinct_values(queryset, "type_name"), *registry.type_names()] if is_task_type(v)}
        if self.value() == "tasks":
            return queryset.filter(type_name__in=sorted(names))
        return queryset.exclude(type_name__in=sorted(names))


class RetryableFilter(admin.SimpleListFilter):
    title = _("retryable failures")
    parameter_name = "retryable"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("Failed, can be retried"))]

    def queryset(self, request: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.filter(status="failed", failure_can_retry=True)
        return queryset


class RootsFilter(admin.SimpleListFilter):
    title = _("tree position")
    parameter_name = "roots"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("Roots only")), ("no", _("Sub-procedures only"))]

    def queryset(self, request: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.filter(root__isnull=True)
        if self.value() == "no":
            return queryset.filter(root__isnull=False)
        return queryset


class ScheduleFilter(admin.RelatedFieldListFilter):
    """The runs of one schedule (``schedule__id__exact``, served by ``procedures_schedule_idx``), or of none.

    Its choices come from the schedule table (by name, at most ``VALUES_LIMIT``), never from the runs.
    """

    def __init__(self, field: Any, request: Any, params: Any, model: Any, model_admin: Any, field_path: str) -> None:
        super().__init__(field, request, params, model, model_admin, field_path)
        self.title = _("schedule")
        self.empty_value_display = _("not started by a schedule")  # type: ignore[assignment]  # lazy, as Django's

    # (pk, name) pairs: Django takes any pk; the stubs want str
    def field_choices(self, field: Any, request: Any, model_admin: Any) -> list[tuple[Any, str]]:  # type: ignore[override]
        return list(Schedule.objects.order_by("name").values_list("pk", "name")[:VALUES_LIMIT])


#: The list's filters; each is read from one index range in list order, or from a small table.
LIST_FILTER: tuple[Any, ...] = ("status", KindFilter, TypeFilter, QueueFilter, ("schedule", ScheduleFilter),
                                RetryableFilter, RootsFilter)
