"""``manage.py procedures_worker``: run a worker until stopped (or, with --burst, until idle)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_procedures.exceptions import ProceduresNotMigrated
from django_procedures.policy.worker_config import WorkerConfigError
from django_procedures.runtime.worker import WorkerRuntime, resolve_config


class Command(BaseCommand):
    help = "Claim and run procedures under leases until stopped (SIGTERM/SIGINT stop gracefully)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--queues", help="Comma-separated queues to serve (default: every queue).")
        parser.add_argument("--concurrency", type=int, default=None,
                            help="Executor threads, 1 to 256, each with its own connection (default: "
                                 "PROCEDURES['CONCURRENCY'], or 4 on PostgreSQL and 1 on SQLite).")
        parser.add_argument("--async-concurrency", type=int, default=None,
                            help="async def steps in flight at once on the worker's event loop, 1 to 100000 "
                                 "(default: PROCEDURES['ASYNC_CONCURRENCY'], 100).")
        parser.add_argument("--burst", action="store_true",
                            help="Exit once nothing runs and nothing is due within BURST_WAIT_SECONDS.")
        parser.add_argument("--lease-seconds", type=float, default=None,
                            help="Lease length, 1 to 86400 seconds (default: PROCEDURES['LEASE_SECONDS']).")
        parser.add_argument("--shutdown-timeout", type=float, default=None,
                            help="Seconds to let running steps finish after SIGTERM before releasing them "
                                 "(default: PROCEDURES['SHUTDOWN_TIMEOUT_SECONDS']).")
        parser.add_argument("--with-scheduler", action="store_true",
                            help="Also run a scheduling pass every PROCEDURES['TICK_SECONDS'] (safe beside Celery "
                                 "beat and other workers doing the same).")
        parser.add_argument("--worker-id", default="", help="Name of this worker in leases and logs.")
        parser.add_argument("--metrics-port", type=int, default=None,
                            help="Serve health probes at http://HOST:PORT/healthz and /readyz, and Prometheus "
                                 "metrics at /metrics (metrics need the [prometheus] extra; the probes do not).")
        # Loopback by default: the metrics server has no authentication, so exposing it is the operator's choice.
        parser.add_argument("--metrics-host", default="127.0.0.1",
                            help="Address the metrics and health server listens on (default: 127.0.0.1, this host "
                                 "only; 0.0.0.0 for every interface).")

    def handle(self, *args: Any, **options: Any) -> None:
        queues = None
        if options["queues"] is not None:
            queues = [q.strip() for q in options["queues"].split(",") if q.strip()]
        try:
            # The options over PROCEDURES, checked by the rules the system checks apply to the settings alone.
            config = resolve_config(queues=queues, concurrency=options["concurrency"], burst=options["burst"],
                                    lease_seconds=options["lease_seconds"],
                                    shutdown_timeout=options["shutdown_timeout"], worker_id=options["worker_id"],
                                    with_scheduler=options["with_scheduler"],
                                    async_concurrency=options["async_concurrency"])
        except WorkerConfigError as error:
            raise CommandError(f"cannot start a worker: {error}") from None
        worker = WorkerRuntime(config)
        freeze_start_up_heap()
        try:
            if options["metrics_port"] is None:
                worker.run()
                return
            with serving_http(worker, options["metrics_host"], options["metrics_port"]):
                worker.run()
        except ProceduresNotMigrated as error:
            raise CommandError(str(error)) from error


def freeze_start_up_heap() -> int:
    """Put what start-up made (Django, the apps, the procedure classes) out of the cyclic collector's reach.

    Those objects live as long as the process, yet every full collection walked them all: about
    90,000, a pause of 10-50 ms on the 2-core reference machine. A worker makes few long-lived
    containers (about 5 young collections per 1,000 no-op procedures), so a full collection comes
    only every few tens of thousands of procedures, but it stalls whatever runs then. After
    ``gc.freeze()`` it walks only what the worker made since. Returns how many objects were frozen.
    """
    gc.collect()  # what start-up left as garbage goes now, not frozen with the rest
    gc.freeze()
    return gc.get_freeze_count()


@contextmanager
def serving_http(worker: WorkerRuntime, host: str, port: int) -> Iterator[None]:
    """Serve the health probes (and, with ``prometheus-client``, count and serve metrics) while the block runs.

    Without ``prometheus-client`` the worker still starts: ``/healthz`` and ``/readyz`` answer,
    ``/metrics`` is a 404 saying to install the extra (and the start-up log says so once). A port
    that cannot be used is a ``CommandError``.
    """
    from django_procedures.runtime import metrics, observe
    from django_procedures.runtime.probes import ProbeServer

    if not 0 <= port <= 65535:
        raise CommandError(f"--metrics-port must be between 0 and 65535; got {port}")
    try:
        counted: metrics.WorkerMetrics | None = metrics.WorkerMetrics(worker.busy_threads)
    except metrics.MetricsUnavailable as error:
        counted = None
        metrics.logger.warning("%s; serving /healthz and /readyz only, /metrics answers 404", error)
    try:
        server = ProbeServer(worker.health, host, port, metrics=counted)
    except OSError as error:
        raise CommandError(str(error)) from None
    if counted is not None:
        observe.observers.append(counted)
    try:
        yield
    finally:
        if counted is not None:
            observe.observers.remove(counted)
        server.close()
