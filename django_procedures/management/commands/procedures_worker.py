"""``manage.py procedures_worker``: run a worker until stopped (or, with --burst, until idle)."""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from django_procedures.conf import conf
from django_procedures.exceptions import ProceduresNotMigrated
from django_procedures.policy.options import check_queue
from django_procedures.runtime.worker import Worker, WorkerOptions

#: Bounds of the options, so that a typo is an error here rather than a traceback (or a stuck worker) later.
MAX_CONCURRENCY = 256
MIN_LEASE_SECONDS = 1.0
MAX_SECONDS = 86_400.0
MAX_WORKER_ID = 200  # leases record it (255 characters), sometimes with a suffix


class Command(BaseCommand):
    help = "Claim and run procedures under leases until stopped (SIGTERM/SIGINT stop gracefully)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--queues", help="Comma-separated queues to serve (default: every queue).")
        parser.add_argument("--concurrency", type=int, default=None,
                            help="Executor threads, 1 to 256, each with its own connection (default: "
                                 "PROCEDURES['CONCURRENCY'], or 4 on PostgreSQL and 1 on SQLite).")
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
                            help="Serve Prometheus metrics at http://HOST:PORT/metrics (needs the [prometheus] extra).")
        parser.add_argument("--metrics-host", default="0.0.0.0",
                            help="Address the metrics server listens on (default: 0.0.0.0, every interface).")

    def handle(self, *args: Any, **options: Any) -> None:
        sqlite = connection.vendor == "sqlite"
        concurrency = options["concurrency"]
        if concurrency is None:
            concurrency = conf.CONCURRENCY or (1 if sqlite else 4)
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise CommandError(f"--concurrency must be between 1 and {MAX_CONCURRENCY} (each thread holds a "
                               f"database connection); got {concurrency}")
        if sqlite and concurrency > 1:
            raise CommandError(
                f"--concurrency {concurrency} is not possible on SQLite, which allows one writer at a time: "
                "run one worker process with --concurrency 1, or use PostgreSQL for concurrent workers")
        lease = float(conf.LEASE_SECONDS) if options["lease_seconds"] is None else options["lease_seconds"]
        if not (math.isfinite(lease) and MIN_LEASE_SECONDS <= lease <= MAX_SECONDS):
            raise CommandError(f"--lease-seconds must be between {MIN_LEASE_SECONDS:g} and {MAX_SECONDS:g} "
                               f"seconds (one day); got {lease}")
        idle = conf.IDLE_IN_TRANSACTION_TIMEOUT_SECONDS
        if idle is not None and float(idle) <= lease:
            raise CommandError(f"--lease-seconds {lease:g} is not shorter than PROCEDURES["
                               f"'IDLE_IN_TRANSACTION_TIMEOUT_SECONDS'] ({idle:g}s), so a step's open transaction "
                               "would be cut while its lease is valid: give a shorter lease or raise that setting")
        shutdown_timeout = options["shutdown_timeout"]
        if shutdown_timeout is None:
            shutdown_timeout = float(conf.SHUTDOWN_TIMEOUT_SECONDS)
        if not (math.isfinite(shutdown_timeout) and 0 <= shutdown_timeout <= MAX_SECONDS):
            raise CommandError(f"--shutdown-timeout must be between 0 and {MAX_SECONDS:g} seconds (one day); "
                               f"got {shutdown_timeout}")
        queues = None
        if options["queues"] is not None:
            queues = [q.strip() for q in options["queues"].split(",") if q.strip()]
            if not queues:
                raise CommandError("--queues needs at least one queue name; leave it out to serve every queue")
            for name in queues:
                try:
                    check_queue(name, "--queues")
                except ValueError as error:
                    raise CommandError(str(error)) from None
        worker_id = options["worker_id"]
        if len(worker_id) > MAX_WORKER_ID or not worker_id.isprintable():
            raise CommandError(f"--worker-id must be at most {MAX_WORKER_ID} printable characters; "
                               f"got {worker_id[:40]!r}{'…' if len(worker_id) > 40 else ''}")
        worker = Worker(WorkerOptions(queues=queues, concurrency=concurrency, burst=options["burst"],
                                      lease_seconds=lease, shutdown_timeout=shutdown_timeout,
                                      worker_id=worker_id, with_scheduler=options["with_scheduler"]))
        freeze_start_up_heap()
        try:
            if options["metrics_port"] is None:
                worker.run()
                return
            with serving_metrics(worker, options["metrics_host"], options["metrics_port"]):
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
def serving_metrics(worker: Worker, host: str, port: int) -> Iterator[None]:
    """Count the worker's metrics and serve them while the block runs; a port in use is a ``CommandError``."""
    from django_procedures.runtime import metrics, observe

    if not 0 <= port <= 65535:
        raise CommandError(f"--metrics-port must be between 0 and 65535; got {port}")
    try:
        counted = metrics.WorkerMetrics(worker.busy_threads)
        server = metrics.MetricsServer(counted, host, port)
    except (metrics.MetricsUnavailable, OSError) as error:
        raise CommandError(str(error)) from None
    observe.observers.append(counted)
    try:
        yield
    finally:
        observe.observers.remove(counted)
        server.close()
