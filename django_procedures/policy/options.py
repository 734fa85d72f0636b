"""Submit options checked at the door: what each must be, and an error that says what to pass.

``submit``, ``submit_many``, a child's constructor and a class's attributes all
go through these, so a bad value never reaches the database (where it would be
stored converted, like ``queue=5`` as ``"5"``, or fail far from its cause).
Type mistakes raise ``TypeError``, values out of range ``ValueError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django_procedures.policy.durations import seconds_of

#: The columns' limits (``ProcedureRun.queue``, ``.key`` and ``.priority``; a test keeps them equal).
QUEUE_MAX_LENGTH = 100
KEY_MAX_LENGTH = 255
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1
#: A larger number of seconds is refused as a probable Unix timestamp (it is about 31.7 years).
RUN_AFTER_SECONDS_MAX = 10**9


def _name(value: Any) -> str:
    return type(value).__name__


def check_queue(queue: Any, where: str = "queue") -> str | None:
    """A queue name, or ``None`` (the class's queue): a non-empty ``str`` a worker's ``--queues`` can name."""
    if queue is None:
        return None
    if not isinstance(queue, str):
        raise TypeError(f"{where} must be a queue name (a str) or None; got {_name(queue)} {queue!r}")
    if not queue.strip():
        raise ValueError(f"{where} must be a non-empty queue name; pass None for the procedure class's queue")
    if queue != queue.strip() or "," in queue or "\x00" in queue:
        raise ValueError(f"{where} {queue!r} cannot be served: a queue name has no surrounding spaces, no comma "
                         "(procedures_worker --queues separates names with commas) and no NUL character")
    if len(queue) > QUEUE_MAX_LENGTH:
        raise ValueError(f"{where} is {len(queue)} characters long; a queue name has at most {QUEUE_MAX_LENGTH}")
    return queue


def check_priority(priority: Any, where: str = "priority") -> int | None:
    """A priority, or ``None`` (the class's): an ``int`` (not a bool) in the column's 32-bit range."""
    if priority is None:
        return None
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"{where} must be an int (higher runs first, default 0) or None; "
                        f"got {_name(priority)} {priority!r}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(f"{where} must be between {PRIORITY_MIN} and {PRIORITY_MAX}; got {priority}")
    return priority


def check_key(key: Any, where: str = "key") -> str | None:
    """An idempotency key, or ``None``: a ``str`` with something besides spaces, at most 255 characters."""
    if key is None:
        return None
    if not isinstance(key, str):
        raise TypeError(f"{where} must be a str (an idempotency key) or None; got {_name(key)} {key!r}")
    if not key.strip():
        raise ValueError(f"{where} {key!r} is empty or blank, so it cannot tell one submission from another; "
                         "pass a key naming the work (e.g. 'provision:acme'), or None for no key")
    if "\x00" in key:
        raise ValueError(f"{where} contains a NUL character, which the database cannot store; remove it")
    if len(key) > KEY_MAX_LENGTH:
        raise ValueError(f"{where} is {len(key)} characters long; a key has at most {KEY_MAX_LENGTH} "
                         "(hash a longer one, e.g. with hashlib.sha256)")
    return key


def check_run_after(run_after: Any, where: str = "run_after") -> datetime | timedelta | None:
    """When to run: an aware ``datetime``, a ``timedelta`` from now, or a number of seconds from now.

    A number comes back as a ``timedelta``. A moment that Python cannot hold
    is refused when it is resolved (:func:`run_at`).
    """
    if run_after is None or isinstance(run_after, timedelta):
        return run_after
    if isinstance(run_after, datetime):
        if run_after.tzinfo is None or run_after.utcoffset() is None:
            raise ValueError(f"{where} is a naive datetime; pass an aware one (e.g. django.utils.timezone.now() "
                             "+ timedelta(minutes=5)) or a timedelta from now")
        return run_after
    if isinstance(run_after, int | float) and not isinstance(run_after, bool):
        if not math.isfinite(run_after):
            raise ValueError(f"{where} must be a finite number of seconds; got {run_after!r}")
        if abs(run_after) >= RUN_AFTER_SECONDS_MAX:
            raise ValueError(f"{where}={run_after!r} looks like a Unix timestamp; a number is seconds from now. "
                             "Pass datetime.fromtimestamp(ts, tz=timezone.utc) for a moment")
        return timedelta(seconds=run_after)
    raise TypeError(f"{where} must be an aware datetime, a timedelta or a number of seconds from now; "
                    f"got {_name(run_after)} {run_after!r}")


def run_at(run_after: datetime | timedelta | float | None, now: datetime, where: str = "run_after") -> datetime:
    """The moment a procedure becomes due: ``now``, ``now + run_after``, or ``run_after`` itself."""
    run_after = check_run_after(run_after, where)
    if run_after is None:
        return now
    if isinstance(run_after, datetime):
        return run_after
    try:
        return now + run_after
    except OverflowError:
        raise ValueError(f"{where}={run_after!r} from now is past the year 9999; pass a shorter delay") from None


def check_debounce(debounce: Any, where: str = "debounce") -> timedelta | None:
    """How long a debounced submit waits for the next one: a ``timedelta`` or a number of seconds, at least 0."""
    if debounce is None:
        return None
    seconds = seconds_of(debounce)
    if seconds is None:
        raise TypeError(f"{where} must be a timedelta or a number of seconds; got {_name(debounce)} {debounce!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{where} must be a finite delay of at least 0 seconds; got {debounce!r}")
    if seconds >= RUN_AFTER_SECONDS_MAX:
        raise ValueError(f"{where}={debounce!r} is over 31 years; pass a delay in seconds or a timedelta")
    return debounce if isinstance(debounce, timedelta) else timedelta(seconds=seconds)


@dataclass(frozen=True, slots=True)
class Options:
    """The submit options as one value, checked when it is made; ``None`` leaves an option to the class.

    What ``submit``, ``submit_many``, ``using()`` and a child's constructor
    carry down to the row data (``django_procedures.submitting``), so an option
    is spelled out and checked in one place. ``run_after`` is kept as checked
    (a number of seconds becomes a ``timedelta``).
    """

    queue: str | None = None
    priority: int | None = None
    run_after: datetime | timedelta | float | None = None  # a number is kept as a timedelta
    key: str | None = None
    #: While the procedure with ``key`` is not claimed, a submit replaces its state and moves it to now + this.
    debounce: timedelta | float | None = None  # a number is kept as a timedelta

    def __post_init__(self) -> None:
        check_queue(self.queue)
        check_priority(self.priority)
        check_key(self.key)
        object.__setattr__(self, "run_after", check_run_after(self.run_after))
        object.__setattr__(self, "debounce", check_debounce(self.debounce))
        if self.debounce is not None and self.run_after is not None:
            raise ValueError("give run_after or debounce, not both: a debounced procedure is due debounce after "
                             "the last submit")

    def given(self) -> dict[str, Any]:
        """The options that are set, by name."""
        return {name: value for name in self.__slots__ if (value := getattr(self, name)) is not None}
