"""A few helpers to write SVG markup by hand, every attribute and text escaped.

The admin's pictures are small, static and server-rendered: strings are enough,
and escaping in one place keeps user text (type names, errors) from breaking out.
"""

from __future__ import annotations

from html import escape
from typing import Any

from django.utils.safestring import SafeString, mark_safe


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


def attrs(**values: Any) -> str:
    """`` name="value"`` pairs; a trailing underscore is dropped (``class_``), ``_`` becomes ``-``; None is left out."""
    parts = []
    for name, value in values.items():
        if value is None:
            continue
        name = name.rstrip("_").replace("_", "-")
        parts.append(f' {name}="{escape(_value(value), quote=True)}"')
    return "".join(parts)


def tag(name: str, *children: str, **values: Any) -> str:
    """``<name ...>children</name>``; children are markup already (use :func:`text` for plain text)."""
    return f"<{name}{attrs(**values)}>{''.join(children)}</{name}>"


def empty(name: str, **values: Any) -> str:
    return f"<{name}{attrs(**values)}/>"


def text(value: Any) -> str:
    return escape(str(value), quote=False)


def title(value: Any) -> str:
    """A ``<title>``: the tooltip, and what a screen reader says for the element."""
    return tag("title", text(value))


def svg(width: float, height: float, label: str, *children: str, **values: Any) -> SafeString:
    """The outer ``<svg role="img">`` with an accessible name, sized in px and scaling down with its box."""
    return mark_safe(tag("svg", title(label), *children, xmlns="http://www.w3.org/2000/svg",  # escaped by tag()
                         viewBox=f"0 0 {_value(width)} {_value(height)}", width=width, height=height, role="img",
                         preserveAspectRatio="xMinYMin meet", **values))
