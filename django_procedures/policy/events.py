"""Events (``Status.wait_for_event`` / ``send_event``): the checks of names, timeouts and payloads.

Standard library only. Every refusal says what to pass instead; nothing is
written when one is raised.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django_procedures.policy.durations import seconds_of
from django_procedures.policy.schedule_args import MAX_DURATION
from django_procedures.policy.state import find_problem, text_problem

#: ``Event.name``'s column: a name longer than this is refused (``ValueError``).
MAX_NAME_LENGTH = 100
#: ``Event.key``'s column.
MAX_KEY_LENGTH = 255

__all__ = ["MAX_KEY_LENGTH", "MAX_NAME_LENGTH", "check_key", "check_name", "encode_payload", "timeout_at",
           "wait_names", "waits_for_text"]


def check_name(name: object, *, where: str = "send_event") -> str:
    """``name`` if it is a usable event name; ``ValueError`` (a non-string: ``TypeError``) otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"{where} takes event names as strings; got {type(name).__name__} {name!r}")
    if not name.strip():
        raise ValueError(f"{where}: an event name must not be empty or blank; got {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"{where}: an event name is at most {MAX_NAME_LENGTH} characters; got {len(name)} "
                         f"({name[:40]!r}...)")
    problem = text_problem(name)
    if problem:  # PostgreSQL's text refuses it at the INSERT (SQLite stores it): refused alike, before writing
        raise ValueError(f"{where}: the event name {name[:40]!r} {problem}")
    return name


def check_key(key: object) -> str | None:
    """``key`` (None: no idempotency key) if usable; ``ValueError``/``TypeError`` saying what to pass."""
    if key is None:
        return None
    if not isinstance(key, str):
        raise TypeError(f"send_event(key=...) takes a string; got {type(key).__name__}")
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"send_event(key=...) is 1 to {MAX_KEY_LENGTH} characters; got {len(key)}")
    problem = text_problem(key)
    if problem:
        raise ValueError(f"send_event(key=...) {problem}")
    return key


def wait_names(names: Iterable[object]) -> tuple[str, ...]:
    """The names a wait waits for, each checked, duplicates dropped (order kept); at least one."""
    checked = tuple(dict.fromkeys(check_name(n, where="Status.wait_for_event") for n in names))
    if not checked:
        raise ValueError('Status.wait_for_event needs at least one event name: '
                         'Status.wait_for_event("approved", "rejected", timeout=timedelta(days=2))')
    return checked


def timeout_at(timeout: timedelta | float | None, *, now: datetime) -> datetime | None:
    """When a wait asked for at ``now`` times out (None: never); ``ValueError`` for a negative, NaN, infinite or
    over-long timeout, or one that is neither a ``timedelta`` nor a number of seconds."""
    if timeout is None:
        return None
    seconds = seconds_of(timeout)
    if seconds is None:
        raise ValueError(f"Status.wait_for_event(timeout=...) takes a timedelta, a number of seconds or None; "
                         f"got {type(timeout).__name__}")
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise ValueError(f"Status.wait_for_event needs a timeout of zero or more seconds, finite; got {timeout!r}")
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(f"Status.wait_for_event's timeout is at most {MAX_DURATION.days} days; got {timeout!r}")
    return now + timedelta(seconds=seconds)


def encode_payload(payload: Any, max_bytes: int) -> str:
    """The payload's JSON text; ``TypeError`` when it is not JSON, ``ValueError`` past ``max_bytes``."""
    try:
        text = json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(f"send_event's payload must be JSON (dicts, lists, strings, numbers, booleans, None): "
                        f"{error}") from None
    problem = find_problem(payload, "payload")
    if problem:  # text json.dumps writes but jsonb refuses (NUL, a lone surrogate), or a tuple that comes back a list
        raise TypeError(f"send_event's payload must be JSON that the database keeps as sent: {problem}")
    size = len(text.encode())
    if size > max_bytes:
        raise ValueError(f"send_event's payload is {size} bytes of JSON, past PROCEDURES['MAX_EVENT_BYTES'] = "
                         f"{max_bytes}: send a reference (an id, a URL) instead of the data")
    return text


def waits_for_text(names: Iterable[str]) -> str:
    """``"approved or rejected"``, ``"a, b or c"``: the names a procedure waits for, for people."""
    shown = list(names)
    if len(shown) <= 1:
        return "".join(shown)
    return ", ".join(shown[:-1]) + " or " + shown[-1]
