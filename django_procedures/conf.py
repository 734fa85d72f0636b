"""The ``PROCEDURES`` settings dict, read lazily with documented defaults.

Nothing reads settings at import time; values are cached and the cache is
dropped on ``setting_changed``, so ``override_settings(PROCEDURES=...)`` works.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver

DEFAULTS: dict[str, Any] = {
    # Seconds a claim is valid without renewal; the heartbeat renews every third of it.
    "LEASE_SECONDS": 30.0,
    # After this long without a successful renewal, running steps see ensure_active() raise.
    # None means two thirds of the lease.
    "RENEWAL_TIMEOUT_SECONDS": None,
    # How often a worker returns procedures whose lease expired.
    "SWEEP_SECONDS": 5.0,
    # Use PostgreSQL LISTEN/NOTIFY to wake idle workers; off for PgBouncer in transaction mode.
    "LISTEN_NOTIFY": True,
    # Prepare the worker's hot statements (claim, checkpoint, completion) on PostgreSQL, so they are planned
    # once per connection; off for PgBouncer in transaction mode before 1.21.
    "PREPARED_STATEMENTS": True,
    # How the default database alias reaches PostgreSQL: None (directly, or through a session-mode pooler) or
    # "pgbouncer-transaction" (PgBouncer in transaction mode: no session state survives a transaction).
    "POOLER": None,
    # A DATABASES alias that reaches the same database directly, used only for LISTEN (workers and
    # handle.wait()); None listens on the default alias.
    "LISTEN_DATABASE": None,
    # Poll interval of an idle worker when LISTEN/NOTIFY is off (or on SQLite).
    "POLL_SECONDS": 1.0,
    # --burst exits once nothing is due now or within this many seconds.
    "BURST_WAIT_SECONDS": 2.0,
    # Threads per worker process; None means 4 on PostgreSQL and 1 on SQLite.
    "CONCURRENCY": None,
    # Most procedures a worker claims beyond its threads, while its recent procedures are short enough
    # that its threads would start them within about 50 ms; 0 claims only for idle threads.
    "PREFETCH": 32,
    "ASYNC_CONCURRENCY": 100,
    # Seconds a stopping worker waits for running steps before releasing their leases.
    "SHUTDOWN_TIMEOUT_SECONDS": 30.0,
    # idle_in_transaction_session_timeout of worker connections; None means twice the lease.
    "IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": None,
    # Seconds between the worker's stats log lines.
    "STATS_SECONDS": 60.0,
    # Fleet-wide limits per queue: {"email": {"concurrency": 10, "rate": (100, 60)}} (rate: count per seconds
    # or timedelta); see docs/flow-control.md. Read by workers at each claim.
    "QUEUES": {},
    # Queue of procedures that name none.
    "DEFAULT_QUEUE": "default",
    # How often procedures_worker --with-scheduler (and the Celery beat entry) runs a scheduling pass.
    "TICK_SECONDS": 1.0,
    # Who ticks the schedules when neither a procedures_worker --with-scheduler nor the Celery beat entry does
    # (e.g. "cron job running manage.py shell -c 'import django_procedures; django_procedures.tick()'"); None:
    # check W004 looks for one of those two. Worker logs name it.
    "TICKER": None,
    # Finished trees older than this are pruned by the workers, a little at a time, and by procedures_prune
    # (its default --older-than): a duration like "30d", seconds, or a timedelta. None: workers keep everything.
    "RETENTION": "30d",
    # Largest state, in bytes of its JSON text, that submit() accepts and a checkpoint writes: 4 MiB.
    "MAX_STATE_BYTES": 4 * 1024 * 1024,
    # Largest event payload, in bytes of its JSON text, that send_event() accepts: 1 MiB.
    "MAX_EVENT_BYTES": 1024 * 1024,
    # Events sent to one procedure that no wait has taken yet: send_event() refuses the one past this.
    "MAX_UNCONSUMED_EVENTS": 1000,
    # Longest stored error text and traceback, in characters.
    "MAX_ERROR_LENGTH": 2000,
    "MAX_TRACEBACK_LENGTH": 20000,
    # State and output keys the admin masks at any depth (case-insensitive), besides each class's `redact`.
    "REDACT": [],
    # Bearer token that lets a scraper read django_procedures.contrib.prometheus's view without a staff login;
    # None: staff users only.
    "METRICS_TOKEN": None,
    # Most rows each count of that view reads (per status; and due rows for the oldest-due ages).
    "METRICS_COUNT_CAP": 100_000,
    # OpenTelemetry spans (extra [otel]): None traces when the process uses OpenTelemetry (it imported
    # opentelemetry and set a tracer provider); True also requires opentelemetry-api (check E015); False never.
    "TRACING": None,
}


class ProceduresSettings:
    """Attribute access to ``settings.PROCEDURES`` merged over :data:`DEFAULTS`."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] | None = None

    @property
    def user_settings(self) -> dict[str, Any]:
        value = getattr(django_settings, "PROCEDURES", None)
        return dict(value or {})

    def _values(self) -> dict[str, Any]:
        if self._cache is None:
            self._cache = {**DEFAULTS, **self.user_settings}
        return self._cache

    def merged(self) -> dict[str, Any]:
        """Every setting: ``settings.PROCEDURES`` over :data:`DEFAULTS` (a copy)."""
        return dict(self._values())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in DEFAULTS:
            raise AttributeError(f"PROCEDURES has no setting {name!r}")
        return self._values()[name]

    @property
    def renewal_timeout(self) -> float:
        value = self.RENEWAL_TIMEOUT_SECONDS
        return float(value) if value is not None else float(self.LEASE_SECONDS) * 2 / 3

    @property
    def idle_in_transaction_timeout(self) -> float:
        value = self.IDLE_IN_TRANSACTION_TIMEOUT_SECONDS
        return float(value) if value is not None else float(self.LEASE_SECONDS) * 2

    def reload(self) -> None:
        self._cache = None


conf = ProceduresSettings()


@receiver(setting_changed)
def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "PROCEDURES":
        conf.reload()
