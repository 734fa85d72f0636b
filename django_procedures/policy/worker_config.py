"""A worker's settings, resolved once from ``PROCEDURES`` and its command line, and the rules they must meet.

The system checks (``django_procedures.checks``) apply these rules to the settings alone;
``procedures_worker`` applies them to the settings with its options laid over them. So a
combination the checks refuse in ``PROCEDURES`` is refused with the same message when one half
of it comes from the command line (``--lease-seconds 120`` with an idle-transaction timeout of
60 s), and the worker then reads only the :class:`WorkerConfig` it was given.

Each value is named in a message by where it came from: ``PROCEDURES['LEASE_SECONDS']`` or
``--lease-seconds``. Pure: no database, no Django settings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django_procedures.policy.options import check_queue

#: Bounds of the worker's values, so that a typo is an error at start rather than a stuck worker later.
MAX_CONCURRENCY = 256
MIN_LEASE_SECONDS = 1.0
MAX_SECONDS = 86_400.0
MAX_WORKER_ID = 200  # leases record it (255 characters), sometimes with a suffix

#: Durations that must be positive (the chores' intervals and the idle worker's poll).
POSITIVE_SECONDS = ("SWEEP_SECONDS", "POLL_SECONDS", "STATS_SECONDS", "TICK_SECONDS")


@dataclass(frozen=True)
class Problem:
    """One broken rule: a system check's id, what is wrong and what to change."""

    id: str | None  # None: an option with no setting, which no system check sees
    msg: str
    hint: str | None = None

    def __str__(self) -> str:
        text = f"{self.msg} ({self.id})" if self.id else self.msg
        return f"{text}. {self.hint}" if self.hint else text


class WorkerConfigError(ValueError):
    """The settings and options cannot run a worker; ``problems`` says each thing to change."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def setting(name: str) -> str:
    """How a message names a key of ``PROCEDURES``."""
    return f"PROCEDURES[{name!r}]"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# -- the rules: each takes a value and the name it came by, and returns what is wrong (or None) ------


def positive_seconds_problem(value: Any, label: str) -> Problem | None:
    """E003: an interval, a finite number of seconds above 0."""
    if _is_number(value) and value > 0:
        return None
    return Problem("django_procedures.E003", f"{label} must be a positive number of seconds; got {value!r}")


def _within_a_day(value: Any, label: str, low: float) -> Problem | None:
    """E003: a duration from ``low`` to one day, both included (NaN and infinity are not numbers here)."""
    if _is_number(value) and low <= value <= MAX_SECONDS:
        return None
    return Problem("django_procedures.E003",
                   f"{label} must be between {low:g} and {MAX_SECONDS:g} seconds (one day); got {value!r}")


def lease_problem(lease: Any, label: str) -> Problem | None:
    return _within_a_day(lease, label, MIN_LEASE_SECONDS)


def shutdown_timeout_problem(timeout: Any, label: str) -> Problem | None:
    return _within_a_day(timeout, label, 0.0)


def renewal_timeout_problem(renewal: Any, lease: float, lease_label: str) -> Problem | None:
    """E004: an explicit renewal timeout must lie between one heartbeat interval (a third of the lease) and the lease.

    Unset, it is two thirds of the lease, which always fits.
    """
    name = setting("RENEWAL_TIMEOUT_SECONDS")
    if renewal is None:
        return None
    if not _is_number(renewal):
        return Problem("django_procedures.E004", f"{name} must be a number of seconds or None; got {renewal!r}")
    if lease / 3 < renewal < lease:
        return None
    return Problem(
        "django_procedures.E004",
        f"{name} is {renewal:g}s; it must be shorter than the lease ({lease:g}s) and longer than one heartbeat "
        f"interval ({lease / 3:g}s)",
        f"Leave it unset (two thirds of the lease) or pick a value between the two, or change {lease_label}.")


def idle_timeout_problem(idle: Any, lease: float, lease_label: str) -> Problem | None:
    """E005: the idle-transaction timeout must outlast the lease, or PostgreSQL cuts a step's valid transaction."""
    name = setting("IDLE_IN_TRANSACTION_TIMEOUT_SECONDS")
    if idle is None:
        return None  # twice the lease
    if not _is_number(idle):
        return Problem("django_procedures.E005", f"{name} must be a number of seconds or None; got {idle!r}")
    if idle > lease:
        return None
    return Problem(
        "django_procedures.E005",
        f"{name} ({idle:g}s) must be longer than the lease ({lease:g}s), or a step's open transaction is cut "
        "while its lease is valid",
        f"Leave it unset (twice the lease) or raise it, or give a shorter {lease_label}.")


def concurrency_problem(concurrency: Any, label: str) -> Problem | None:
    """E006: a number of executor threads, each holding a database connection (None: the default)."""
    if concurrency is None or (isinstance(concurrency, int) and not isinstance(concurrency, bool)
                               and 1 <= concurrency <= MAX_CONCURRENCY):
        return None
    return Problem("django_procedures.E006",
                   f"{label} must be between 1 and {MAX_CONCURRENCY} (each thread holds a database connection), "
                   f"or None for the default; got {concurrency!r}")


#: The most ``async def`` steps one worker process keeps in flight (``--async-concurrency``).
MAX_ASYNC_CONCURRENCY = 100_000


def async_concurrency_problem(value: Any, label: str) -> Problem | None:
    """E029: how many async steps one worker process awaits at once (tasks on its event loop, no connections)."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_ASYNC_CONCURRENCY:
        return None
    return Problem("django_procedures.E029",
                   f"{label} must be an integer between 1 and {MAX_ASYNC_CONCURRENCY} (async def steps in flight "
                   f"at once on the worker's event loop); got {value!r}")


def sqlite_concurrency_problem(concurrency: Any, label: str) -> Problem | None:
    """E008: SQLite allows one writer at a time, so one thread in one worker process."""
    if not isinstance(concurrency, int) or concurrency <= 1:
        return None
    return Problem("django_procedures.E008",
                   f"a concurrency of {concurrency} is not possible on SQLite, which allows one writer at a time",
                   f"Set {label} to 1 (one worker process with one thread), or use PostgreSQL for concurrency.")


def prefetch_problem(prefetch: Any) -> Problem | None:
    if isinstance(prefetch, int) and not isinstance(prefetch, bool) and prefetch >= 0:
        return None
    return Problem("django_procedures.E011",
                   f"{setting('PREFETCH')} must be an integer of at least 0; got {prefetch!r}",
                   "0 claims only for idle threads; the default is 32.")


# -- the settings and the command line together -----------------------------------------------------


def settings_problems(values: Mapping[str, Any], *, sqlite: bool) -> list[Problem]:
    """What the system checks report of a worker's settings (``values``: ``PROCEDURES`` over its defaults).

    The durations come first: when one is wrong the rules that compare them are not applied.
    """
    try:
        WorkerConfig.resolve(values, sqlite=sqlite)
    except WorkerConfigError as error:
        return list(error.problems)
    return []


def _present(*found: Problem | None) -> list[Problem]:
    return [p for p in found if p is not None]


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker reads, resolved once: its options, else ``PROCEDURES``, else the defaults."""

    queues: tuple[str, ...] | None
    concurrency: int
    burst: bool
    lease_seconds: float
    #: The heartbeat's: RENEWAL_TIMEOUT_SECONDS (else two thirds of the lease), never more than two thirds.
    renewal_timeout: float
    #: PostgreSQL's idle_in_transaction_session_timeout on the connections that run steps.
    idle_in_transaction_timeout: float
    shutdown_timeout: float
    worker_id: str
    with_scheduler: bool
    prefetch: int
    listen_notify: bool
    poll_seconds: float
    burst_wait_seconds: float
    sweep_seconds: float
    stats_seconds: float
    tick_seconds: float
    #: ``async def`` steps in flight at once on the worker's event loop (``--async-concurrency``).
    async_concurrency: int = 100

    @property
    def own_idle_timeout(self) -> float:
        """The idle timeout of the worker's own connections (main thread, heartbeat), which run no steps.

        Their transactions are short, so they need no more than twice the
        lease, whatever a slow step needs: a worker frozen before such a
        transaction's ``COMMIT`` (a sweep that took a procedure back, a claim)
        holds its rows, which every other worker's sweep and claim skip.
        """
        return min(self.idle_in_transaction_timeout, 2 * self.lease_seconds)

    @classmethod
    def resolve(
        cls,
        values: Mapping[str, Any],
        *,
        sqlite: bool,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        burst: bool = False,
        lease_seconds: float | None = None,
        shutdown_timeout: float | None = None,
        worker_id: str = "",
        with_scheduler: bool = False,
        async_concurrency: int | None = None,
    ) -> WorkerConfig:
        """Lay the command line (the keyword arguments; None: not given) over ``values`` and apply every rule.

        ``values`` is ``PROCEDURES`` merged over its defaults. Raises :class:`WorkerConfigError` listing
        each problem, each naming the setting or option to change.
        """
        lease_label, lease = ("--lease-seconds", lease_seconds) if lease_seconds is not None else (
            setting("LEASE_SECONDS"), values["LEASE_SECONDS"])
        shutdown_label, shutdown = ("--shutdown-timeout", shutdown_timeout) if shutdown_timeout is not None else (
            setting("SHUTDOWN_TIMEOUT_SECONDS"), values["SHUTDOWN_TIMEOUT_SECONDS"])
        threads_label, threads = ("--concurrency", concurrency) if concurrency is not None else (
            setting("CONCURRENCY"), values["CONCURRENCY"])
        async_label, awaiting = ("--async-concurrency", async_concurrency) if async_concurrency is not None else (
            setting("ASYNC_CONCURRENCY"), values.get("ASYNC_CONCURRENCY", 100))
        problems = _present(lease_problem(lease, lease_label), shutdown_timeout_problem(shutdown, shutdown_label),
                          *(positive_seconds_problem(values[name], setting(name)) for name in POSITIVE_SECONDS))
        if problems:
            raise WorkerConfigError(problems)
        lease = float(lease)
        renewal, idle = values["RENEWAL_TIMEOUT_SECONDS"], values["IDLE_IN_TRANSACTION_TIMEOUT_SECONDS"]
        problems = _present(renewal_timeout_problem(renewal, lease, lease_label),
                          idle_timeout_problem(idle, lease, lease_label),
                          concurrency_problem(threads, threads_label)
                          or (sqlite_concurrency_problem(threads, threads_label) if sqlite else None),
                          prefetch_problem(values["PREFETCH"]),
                          async_concurrency_problem(awaiting, async_label))
        problems += _command_line_problems(queues, worker_id)
        if problems:
            raise WorkerConfigError(problems)
        return cls(
            queues=tuple(queues) if queues is not None else None,
            concurrency=threads or (1 if sqlite else 4),
            burst=burst,
            lease_seconds=lease,
            renewal_timeout=min(float(renewal) if renewal is not None else math.inf, lease * 2 / 3),
            idle_in_transaction_timeout=float(idle) if idle is not None else 2 * lease,
            shutdown_timeout=float(shutdown),
            worker_id=worker_id,
            with_scheduler=with_scheduler,
            prefetch=int(values["PREFETCH"]),
            listen_notify=bool(values["LISTEN_NOTIFY"]),
            poll_seconds=float(values["POLL_SECONDS"]),
            burst_wait_seconds=float(values["BURST_WAIT_SECONDS"]),
            sweep_seconds=float(values["SWEEP_SECONDS"]),
            stats_seconds=float(values["STATS_SECONDS"]),
            tick_seconds=float(values["TICK_SECONDS"]),
            async_concurrency=awaiting,
        )


def _command_line_problems(queues: Sequence[str] | None, worker_id: str) -> list[Problem]:
    """The options that have no setting: ``--queues`` and ``--worker-id``."""
    found: list[Problem] = []
    if queues is not None:
        if not queues:
            found.append(Problem(None, "--queues needs at least one queue name; leave it out to serve every queue"))
        for name in queues:
            try:
                check_queue(name, "--queues")
            except (TypeError, ValueError) as error:
                found.append(Problem(None, str(error)))
    if len(worker_id) > MAX_WORKER_ID or not worker_id.isprintable():
        found.append(Problem(None, f"--worker-id must be at most {MAX_WORKER_ID} printable characters; "
                                    f"got {worker_id[:40]!r}{'…' if len(worker_id) > 40 else ''}"))
    return found
