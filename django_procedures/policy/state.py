"""Strict JSON for procedure state: what goes in comes back out unchanged."""

from __future__ import annotations

import copy
import json
import math
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from functools import lru_cache
from typing import Any

#: Deepest nesting of dicts and lists a state or output may have (the outermost one counts). The
#: runtime copies state with :func:`copy_state` and Python's JSON codec recurses once per level, both
#: under the interpreter's recursion limit (1,000 frames): 100 levels leave room for the frames
#: already on the stack.
MAX_DEPTH = 100

#: Most digits PostgreSQL's ``numeric`` (which ``jsonb`` numbers are) holds before the decimal point.
_PG_NUMERIC_DIGITS = 131072


class StateError(TypeError):
    """A state (or output) that cannot be stored as strict JSON."""


def max_int_digits() -> int:
    """Most decimal digits an integer in state may have: what Python turns into text (and back).

    That is ``sys.get_int_max_str_digits()`` (4,300 by default, set with
    ``PYTHONINTMAXSTRDIGITS``); where it is unlimited, what PostgreSQL holds.
    """
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0
    return limit or _PG_NUMERIC_DIGITS


@lru_cache(maxsize=4)
def _int_bound(digits: int) -> int:
    return 10**digits


def text_problem(text: str) -> str | None:
    """Why PostgreSQL would refuse ``text`` in a ``jsonb`` or text column (SQLite stores it), or None."""
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which JSON in the database cannot hold"
    if _SURROGATE.search(text):
        return ("contains a lone surrogate (a half of a UTF-16 pair, such as \\ud800), which is not text; "
                "decode bytes with errors='replace', or store them as base64")
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def find_problem(value: Any, path: str = "state") -> str | None:
    """Return a sentence naming the first value that is not strict JSON, or None.

    Strict means it survives a round trip through PostgreSQL ``jsonb``
    unchanged: dicts with string keys, lists, strings without NUL characters
    or lone surrogates, finite numbers, integers Python can write as text
    (see :func:`max_int_digits`), booleans and None, nested at most
    :data:`MAX_DEPTH` levels. Tuples are refused because they come back as
    lists.
    """
    stack: list[tuple[str, Any, int]] = [(path, value, 0)]
    while stack:
        where, item, depth = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, int):
            if not -2**63 <= item < 2**63 and abs(item) >= _int_bound(max_int_digits()):
                return (f"{where} is an integer of more than {max_int_digits()} digits, which Python cannot "
                        "write as JSON; store it as a string")
            continue
        if isinstance(item, str):
            problem = text_problem(item)
            if problem:
                return f"{where} {problem}"
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"{where} is {item!r}; JSON has no NaN or infinity, store a string or None instead"
            continue
        if isinstance(item, (dict, list)) and depth >= MAX_DEPTH:
            shown = where if len(where) <= 80 else f"{where[:60]}...{where[-16:]}"  # not 100 levels of path
            return (f"{shown} is nested more than {MAX_DEPTH} levels deep (dicts and lists); "
                    "flatten it, or store the deep part as a JSON string")
        if isinstance(item, dict):
            for key, sub in item.items():
                if not isinstance(key, str):
                    return (
                        f"{where} has the key {key!r} of type {type(key).__name__}; "
                        "JSON object keys must be strings"
                    )
                problem = text_problem(key)
                if problem:
                    return f"{where} has a key that {problem}"
                stack.append((f"{where}[{key!r}]", sub, depth + 1))
            continue
        if isinstance(item, list):
            stack.extend((f"{where}[{i}]", sub, depth + 1) for i, sub in enumerate(item))
            continue
        hint = "; use a list" if isinstance(item, tuple) else "; convert it to a string, number, list or dict"
        return f"{where} is a {type(item).__name__}, which is not JSON{hint}"
    return None


def check_state(value: Any, path: str = "state") -> None:
    """Raise :class:`StateError` unless ``value`` is strict JSON."""
    problem = find_problem(value, path)
    if problem:
        raise StateError(problem)


# Python writes a float of 1e16 or more as ``1e+16``; PostgreSQL's numeric reads that as an integer
# and jsonb gives back ``10000000000000000``, which json.loads turns into an int. Written out in full
# with a ``.0`` the number keeps its fraction digit in jsonb, and json.loads gives back the same float.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|(-?\d+(?:\.\d+)?[eE]\+\d+)')


def _positional(match: re.Match[str]) -> str:
    number = match.group(1)
    if number is None:  # a string: left as it is
        return match.group(0)
    return format(Decimal(number), "f") + ".0"


def keep_floats(text: str) -> str:
    """JSON text with every float written so that a ``jsonb`` round trip gives back a float."""
    if "e+" not in text and "E+" not in text:
        return text
    return _TOKEN.sub(_positional, text)


class StateEncoder(json.JSONEncoder):
    """The JSON encoder of state and output columns: floats stay floats through ``jsonb`` (see :func:`keep_floats`).

    Inside :func:`written_as` it writes that block's value (that very object) as the text already made for it.
    """

    def encode(self, o: Any) -> str:
        if o is _encoded.value:
            return _encoded.text
        return keep_floats(super().encode(o))


class _Encoded(threading.local):
    value: Any = object()  # matches nothing until written_as() sets it
    text: str = ""


_encoded = _Encoded()


def encode_state(value: Any) -> str:
    """``value`` as the state column's JSON text: what the field writes (ASCII, so its length is its size in bytes)."""
    return json.dumps(value, cls=StateEncoder)


@contextmanager
def written_as(value: Any, text: str) -> Iterator[None]:
    """While the block runs, this thread's :class:`StateEncoder` writes ``value`` as ``text``, not again.

    For a checkpoint: its state is encoded once to measure it (:func:`encode_state`), and the write reuses
    that text. ``value`` must not change inside the block.
    """
    before = _encoded.value, _encoded.text
    _encoded.value, _encoded.text = value, text
    try:
        yield
    finally:
        _encoded.value, _encoded.text = before


class StateTooLarge(ValueError):
    """A state whose JSON text is larger than ``PROCEDURES["MAX_STATE_BYTES"]``."""


def size_problem(text: str, limit: int, where: str = "state") -> str | None:
    """A sentence saying that ``text`` (a state's JSON) is over ``limit`` bytes and what to do, or None."""
    if len(text) <= limit:
        return None
    return (f"{where} is {len(text):,} bytes as JSON, more than PROCEDURES['MAX_STATE_BYTES'] ({limit:,} bytes); "
            "keep large data elsewhere (a file, a table, object storage) and put its key in the state, or raise "
            "the setting")


def dumps(value: Any, **options: Any) -> str:
    """Serialise already-checked JSON compactly, floats kept as floats (see :func:`keep_floats`)."""
    return keep_floats(json.dumps(value, separators=(",", ":"), allow_nan=False, **options))


def copy_state(value: Any) -> Any:
    """``copy.deepcopy(value)``, made faster for what state is made of: dicts, lists, strings, numbers, None.

    The same copy: a dict or list that appears twice (or contains itself)
    does so in the copy too, and any other type is left to ``copy.deepcopy``.
    The executor copies a claim's state before each step (several times, so
    a failed attempt starts again from the checkpoint): for small states the
    generic ``deepcopy`` dispatch cost more than the step.
    """
    return _copy(value, {})


def _copy(value: Any, memo: dict[int, Any]) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value  # immutable: deepcopy returns these themselves
    if kind is dict:
        done = memo.get(id(value))
        if done is not None:
            return done
        out: dict[Any, Any] = {}
        memo[id(value)] = out
        for key, item in value.items():
            out[_copy(key, memo)] = _copy(item, memo)
        return out
    if kind is list:
        done = memo.get(id(value))
        if done is not None:
            return done
        items: list[Any] = []
        memo[id(value)] = items
        for item in value:
            items.append(_copy(item, memo))
        return items
    return copy.deepcopy(value, memo)  # a shared memo: what deepcopy itself would make of the whole value
