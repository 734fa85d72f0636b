"""Task arguments and return values as strict JSON, with errors that name the offending value."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from inspect import Parameter, signature
from typing import Any

from django_procedures.policy.state import MAX_DEPTH

#: Deepest nesting of one argument: the arguments are stored as ``{"args": [...], "kwargs": {...}}``,
#: two levels of the state's :data:`~django_procedures.policy.state.MAX_DEPTH`.
MAX_ARGUMENT_DEPTH = MAX_DEPTH - 2


def to_json(value: Any, where: str, max_depth: int = MAX_DEPTH) -> Any:
    """``value`` as strict JSON, converted as the framework converts it (tuples to lists, UTF-8 bytes to str).

    Raises ``TypeError`` naming ``where`` (and the path inside it) for anything
    that would not come back unchanged from the database: other types, dict keys
    that are not strings, NaN or infinity, NUL characters, non-UTF-8 bytes, and
    dicts and lists nested more than ``max_depth`` levels (``value`` itself counts as one).
    """
    return _to_json(value, where, 1, (where, max_depth))


def _to_json(value: Any, where: str, depth: int, limit: tuple[str, int]) -> Any:
    """:func:`to_json` of ``value`` found at ``where``, ``depth`` levels into ``limit``'s (top name, max depth)."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, str):
        if "\x00" in value:
            raise TypeError(f"{where} contains a NUL character (\\u0000), which JSON in the database cannot hold")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{where} is {value!r}; JSON has no NaN or infinity, pass a string or None instead")
        return value
    if isinstance(value, bytes):
        try:
            return _to_json(value.decode("utf-8"), where, depth, limit)
        except UnicodeDecodeError:
            raise TypeError(f"{where} is bytes that are not UTF-8 text; pass base64 text instead") from None
    if depth > limit[1] and isinstance(value, Mapping | Sequence):
        # Checked here, not left to Python's recursion limit: a RecursionError says nothing of the value.
        raise TypeError(f"{limit[0]} is nested more than {limit[1]} levels deep (dicts and lists, the value itself "
                        "counting as one); flatten it, or pass the deep part as a JSON string")
    if isinstance(value, Mapping):
        converted = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where} has the key {key!r} of type {type(key).__name__}; JSON object keys "
                                "must be strings")
            converted[_to_json(key, f"a key of {where}", depth, limit)] = _to_json(
                item, f"{where}[{key!r}]", depth + 1, limit)
        return converted
    if isinstance(value, Sequence):  # str and bytes were handled above
        return [_to_json(item, f"{where}[{i}]", depth + 1, limit) for i, item in enumerate(value)]
    raise TypeError(f"{where} is a {type(value).__name__}, which is not JSON; pass a string, number, bool, "
                    "None, list or dict instead (for a model instance, its primary key)")


def arguments_to_json(func: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], *,
                      takes_context: bool = False) -> tuple[list[Any], dict[str, Any]]:
    """``args`` and ``kwargs`` as strict JSON; the ``TypeError`` names the argument by its parameter name."""
    try:
        parameters = [p.name for p in signature(func).parameters.values()
                      if p.kind in (Parameter.POSITIONAL_ONLY, Parameter.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        parameters = []
    if takes_context:
        parameters = parameters[1:]
    plain_args = [to_json(arg, f"argument {parameters[i]!r}" if i < len(parameters) else f"positional argument {i}",
                          MAX_ARGUMENT_DEPTH) for i, arg in enumerate(args)]
    plain_kwargs = {}
    for name, value in kwargs.items():
        if not isinstance(name, str):  # pragma: no cover - Python itself refuses this in a call
            raise TypeError(f"keyword argument names must be strings; got {name!r}")
        plain_kwargs[name] = to_json(value, f"argument {name!r}", MAX_ARGUMENT_DEPTH)
    return plain_args, plain_kwargs
