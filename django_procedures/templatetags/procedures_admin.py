"""Template tags of the procedures admin."""

from __future__ import annotations

from typing import Any

from django import template
from django.contrib.admin.templatetags.base import InclusionAdminNode

from django_procedures.admin.changelist import date_hierarchy

register = template.Library()


@register.tag(name="procedures_date_hierarchy")
def procedures_date_hierarchy(parser: Any, token: Any) -> InclusionAdminNode:
    """``{% procedures_date_hierarchy cl %}``: the date drill-down without a DISTINCT over the table."""
    return InclusionAdminNode(parser, token, func=date_hierarchy, template_name="date_hierarchy.html",
                              takes_context=False)
