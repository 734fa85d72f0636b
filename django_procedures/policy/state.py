"""Strict JSON for procedure state: what goes in comes back out unchanged."""

from __future__ import annotations

import json
import math
from typing import Any


class StateError(TypeError):
    """A state (or output) that cannot be stored as strict JSON."""


def find_problem(value: Any, path: str = "state") -> str | None:
    """Return a sentence naming the first value that is not strict JSON, or None.

    Strict means it survives a round trip through PostgreSQL ``jsonb``
    unchanged: dicts with string keys, lists, strings without NUL characters,
    finite numbers, booleans and None. Tuples are refused because they come
    back as lists.
    """
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if item is None or isinstance(item, (bool, int)):
            continue
        if isinstance(item, str):
            if "\x00" in item:
                return f"{where} contains a NUL character (\\u0000), which JSON in the database cannot hold"
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"{where} is {item!r}; JSON has no NaN or infinity, store a string or None instead"
            continue
        if isinstance(item, dict):
            for key, sub in item.items():
                if not isinstance(key, str):
                    return (
                        f"{where} has the key {key!r} of type {type(key).__name__}; "
                        "JSON object keys must be strings"
                    )
                if "\x00" in key:
                    return f"{where} has a key containing a NUL character (\\u0000)"
                stack.append((f"{where}[{key!r}]", sub))
            continue
        if isinstance(item, list):
            stack.extend((f"{where}[{i}]", sub) for i, sub in enumerate(item))
            continue
        hint = "; use a list" if isinstance(item, tuple) else "; convert it to a string, number, list or dict"
        return f"{where} is a {type(item).__name__}, which is not JSON{hint}"
    return None


def check_state(value: Any, path: str = "state") -> None:
    """Raise :class:`StateError` unless ``value`` is strict JSON."""
    problem = find_problem(value, path)
    if problem:
        raise StateError(problem)


def dumps(value: Any) -> str:
    """Serialise already-checked JSON compactly."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False)
