"""The fleet: many worker processes connected directly, and the same fleet behind PgBouncer.

``python -m benchmarks.run --only fleet`` (run on purpose: not part of the default selection). For each way
of connecting, ``fleet_workers`` long-running workers of ``fleet_threads`` threads start on a fresh
database and wait idle; then ``pickup`` procedures are submitted one at a time at ``pickup_rate`` per second
(pickup latency: step start - submit commit), then ``fleet_procedures`` no-ops at once (throughput: submit
commit to the last finish). Meanwhile ``pg_stat_activity`` is sampled every 0.1 s: the PostgreSQL
connections the fleet holds (the benchmark's own one left out). Behind PgBouncer (transaction mode,
``fleet_pool`` server connections, the configuration of ``.ci/pgbouncer.ini``) the workers LISTEN on direct
connections, one each: see docs/scaling.md.

The direct fleet needs about ``fleet_workers x (fleet_threads + 3)`` connections: the benchmark says so
and stops before starting it when the server's ``max_connections`` leaves too few free.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from benchmarks.harness import BenchmarkError, close_connection, percentile, wait_until_done
from benchmarks.pgbouncer import WORKER_SETTINGS, PgBouncer, find_pgbouncer


class ConnectionSampler:
    """Counts the backends connected to one database every ``interval`` seconds, on a thread of its own."""

    def __init__(self, server: Any, dbname: str, exclude: int, interval: float = 0.1) -> None:
        self.server, self.dbname, self.exclude, self.interval = server, dbname, exclude, interval
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with self.server.connect(self.dbname) as conn:  # itself one backend of the database: left out
            while not self._stop.is_set():
                row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                   "AND pid NOT IN (pg_backend_pid(), %s)", [self.exclude]).fetchone()
                self.samples.append(int(row[0]))
                self._stop.wait(self.interval)

    @property
    def peak(self) -> int:
        return max(self.samples, default=0)


def _check_room(server: Any, workers: int, threads: int) -> None:
    """A direct fleet beyond the server's max_connections would fail in its workers: say so before."""
    limit, used = server.execute("SELECT current_setting('max_connections')::int, "
                                 "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')")[0]
    needed = workers * (threads + 3)
    if needed > limit - used - 3:  # 3: superuser_reserved_connections' default
        raise BenchmarkError(
            f"the direct fleet needs about {needed} connections ({workers} workers x ({threads} threads + main "
            f"loop, heartbeat, LISTEN)) and the server has {limit - used} of max_connections {limit} free; "
            "raise max_connections, or give --database-url a server of its own (the soak's throwaway cluster: "
            "python -m benchmarks.soak --keep prints one), or lower --size fleet_workers=N")


def _wait_started(pool: Any, count: int, timeout: float) -> None:
    """Polling workers sit in no LISTEN: wait for their rows in the worker registry instead."""
    from django_procedures.models import Worker

    deadline = time.monotonic() + timeout
    while Worker.objects.filter(stopped_at__isnull=True).count() < count:
        if time.monotonic() > deadline:
            raise BenchmarkError(f"workers did not start within {timeout:.0f}s\n{pool.logs()}")
        time.sleep(0.1)


def _run_fleet(ctx: Any, label: str, bouncer: PgBouncer | None, listen: bool = True) -> dict[str, float]:
    from django.db import connection, transaction

    from benchmarks.common import submit
    from benchmarks.procedures import Noop, Stamp
    from benchmarks.workers import Workers
    from django_procedures.models import ProcedureRun

    sizes = ctx.sizes
    with ctx.databases.fresh(f"fleet_{label}") as db:
        env: dict[str, str] = {}
        if bouncer is None:
            pool = ctx.workers(db)
            settings: dict[str, Any] = {}
        elif listen:
            pool = Workers(bouncer.url(db), ctx.log_dir)
            settings, env = dict(WORKER_SETTINGS), {"LISTEN_DATABASE_URL": ctx.url(db)}
        else:
            pool = Workers(bouncer.url(db), ctx.log_dir)
            settings = {**WORKER_SETTINGS, "LISTEN_DATABASE": None, "LISTEN_NOTIFY": False}
        with connection.cursor() as cursor:  # the benchmark's own connection, which the sampler leaves out
            cursor.execute("SELECT pg_backend_pid()")
            own = cursor.fetchone()[0]
        with pool, ConnectionSampler(ctx.server, db, exclude=own) as sampler:
            pool.start(sizes.fleet_workers, concurrency=sizes.fleet_threads, burst=False, settings=settings,
                       label=f"{label}-", env=env)
            if listen:
                pool.wait_idle(ctx.server, db, sizes.fleet_workers, timeout=sizes.timeout)
            else:
                _wait_started(pool, sizes.fleet_workers, sizes.timeout)
            time.sleep(min(ctx.sizes.settle, 3.0))
            idle_connections = sampler.samples[-1] if sampler.samples else 0
            committed: dict[Any, float] = {}
            begin = time.monotonic()
            for i in range(sizes.pickup):
                delay = begin + i / sizes.pickup_rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                with transaction.atomic():
                    handle = Stamp.submit({"i": i})
                committed[handle.id] = time.time()
            wait_until_done(sizes.pickup, timeout=sizes.timeout, workers=pool)
            started = dict(ProcedureRun.objects.filter(type_name=Stamp.type_name)
                           .values_list("id", "output__started"))
            latencies = [(started[pid] - at) * 1000 for pid, at in committed.items()]

            submit(Noop, [{}] * sizes.fleet_procedures)
            t0 = time.monotonic()
            wait_until_done(sizes.pickup + sizes.fleet_procedures, timeout=sizes.timeout, workers=pool,
                            interval=0.05)
            drained = time.monotonic() - t0
            close_connection()
        return {"throughput": sizes.fleet_procedures / drained, "p50": percentile(latencies, 50),
                "p99": percentile(latencies, 99), "peak": sampler.peak, "idle": idle_connections}


#: The ways of connecting the fleet: (key, label in the table, through PgBouncer, LISTEN).
WAYS = [
    ("direct", "direct", False, True),
    ("pgbouncer", "PgBouncer transaction mode, {pool} server connections, LISTEN directly", True, True),
    ("polling", "PgBouncer transaction mode, {pool} server connections, LISTEN_NOTIFY off", True, False),
]


def fleet(ctx: Any) -> list[Any]:
    from benchmarks.common import Metric

    sizes = ctx.sizes
    shape = f"{sizes.fleet_workers} workers x {sizes.fleet_threads} threads"
    results: dict[str, dict[str, list[float]]] = {}
    _check_room(ctx.server, sizes.fleet_workers, sizes.fleet_threads)
    skipped = None if find_pgbouncer() else ("pgbouncer is not installed (apt-get install pgbouncer): the "
                                             "PgBouncer half was skipped")
    bouncer = None
    if skipped:
        ctx.progress(f"  {skipped}")
    else:
        bouncer = PgBouncer(server_port=ctx.server.port, pool_size=sizes.fleet_pool)
        bouncer.start()
    try:
        for key, label, pooled, listen in WAYS:
            if pooled and bouncer is None:
                continue
            for run in range(ctx.runs):
                figures = _run_fleet(ctx, f"{key}{run}", bouncer if pooled else None, listen)
                for name, value in figures.items():
                    results.setdefault(key, {}).setdefault(name, []).append(value)
                ctx.progress(f"  fleet run {run + 1}, {label.format(pool=sizes.fleet_pool)}: {_describe(figures)}")
    finally:
        if bouncer is not None:
            bouncer.remove()
    metrics = []
    for key, label, _, _ in WAYS:
        if key not in results:
            continue
        figures = results[key]
        name = f"10 fleet, {label.format(pool=sizes.fleet_pool)}"
        metrics += [
            Metric(name, f"throughput, {sizes.fleet_procedures} no-ops, {shape}", "procedures/s",
                   figures["throughput"]),
            Metric(name, f"pickup p50, {sizes.pickup} submitted at {sizes.pickup_rate:g}/s", "ms", figures["p50"],
                   digits=1),
            Metric(name, "pickup p99", "ms", figures["p99"], digits=1),
            Metric(name, "PostgreSQL connections, idle fleet", "connections", figures["idle"]),
            Metric(name, "PostgreSQL connections, peak (pg_stat_activity every 0.1 s)", "connections",
                   figures["peak"]),
        ]
    if skipped:
        metrics.append(Metric("10 fleet, PgBouncer", "skipped", "", note=skipped))
    return metrics


def _describe(figures: dict[str, float]) -> str:
    return (f"{figures['throughput']:,.0f} procedures/s, pickup p50 {figures['p50']:.1f} ms p99 "
            f"{figures['p99']:.1f} ms, connections {figures['idle']:.0f} idle / {figures['peak']:.0f} peak")
