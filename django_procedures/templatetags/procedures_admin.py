"""Template tags of the procedures admin."""

from __future__ import annotations

from inspect import signature
from typing import Any

from django import template
from django.contrib.admin.templatetags.base import InclusionAdminNode

from django_procedures.admin.changelist import date_hierarchy
from django_procedures.models.procedure_run import STATUS_CHOICES
from django_procedures.policy import ids

register = template.Library()

#: Django 6.1 gave InclusionAdminNode a leading ``name`` argument (the tag's name, for its error messages).
_TAKES_NAME = "name" in signature(InclusionAdminNode.__init__).parameters


@register.tag(name="procedures_date_hierarchy")
def procedures_date_hierarchy(parser: Any, token: Any) -> InclusionAdminNode:
    """``{% procedures_date_hierarchy cl %}``: the date drill-down without a DISTINCT over the table."""
    named = {"name": "procedures_date_hierarchy"} if _TAKES_NAME else {}
    return InclusionAdminNode(parser=parser, token=token, func=date_hierarchy, template_name="date_hierarchy.html",
                              takes_context=False, **named)


_LABELS = dict(STATUS_CHOICES)


@register.filter
def status_label(status: str) -> str:
    """A status as the filters and the procedure page name it: ``rolling_back`` reads ``rolling back``."""
    return str(_LABELS.get(status, status))


@register.filter
def short_id(value: Any) -> str:
    """``{{ run.id|short_id }}``: the random end of an id (``policy.ids.short_id``)."""
    return ids.short_id(value)
