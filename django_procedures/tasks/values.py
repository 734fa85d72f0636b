"""Task arguments and return values as strict JSON, with errors that name the offending value."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from inspect import Parameter, signature
from typing import Any


def to_json(value: Any, where: str) -> Any:
    """``value`` as strict JSON, converted as the framework converts it (tuples to lists, UTF-8 bytes to str).

    Raises ``TypeError`` naming ``where`` (and the path inside it) for anything
    that would not come back unchanged from the database: other types, dict keys
    that are not strings, NaN or infinity, NUL characters, non-UTF-8 bytes.
    """
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
            return to_json(value.decode("utf-8"), where)
        except UnicodeDecodeError:
            raise TypeError(f"{where} is bytes that are not UTF-8 text; pass base64 text instead") from None
    if isinstance(value, Mapping):
        converted = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where} has the key {key!r} of type {type(key).__name__}; JSON object keys "
                                "must be strings")
            converted[to_json(key, f"a key of {where}")] = to_json(item, f"{where}[{key!r}]")
        return converted
    if isinstance(value, Sequence):  # str and bytes were handled above
        return [to_json(item, f"{where}[{i}]") for i, item in enumerate(value)]
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
    plain_args = [to_json(arg, f"argument {parameters[i]!r}" if i < len(parameters) else f"positional argument {i}")
                  for i, arg in enumerate(args)]
    plain_kwargs = {}
    for name, value in kwargs.items():
        if not isinstance(name, str):  # pragma: no cover - Python itself refuses this in a call
            raise TypeError(f"keyword argument names must be strings; got {name!r}")
        plain_kwargs[name] = to_json(value, f"argument {name!r}")
    return plain_args, plain_kwargs
