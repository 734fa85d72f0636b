"""What the benchmarks share: sizes, the result row, the run's context, submitting, and the drains and
measurements that more than one benchmark makes (``suite.py`` and the benchmarks beside it import from here;
nothing here imports a benchmark).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchmarkError, Databases, Server, close_connection, finished_span, wait_until_done
from benchmarks.workers import Workers

#: Procedures per ``submit_many`` call: one INSERT statement each, all in one transaction.
SUBMIT_CHUNK = 1000
#: Worker settings that keep every finished procedure (no retention pass while measuring something else).
KEEP_HISTORY = {"RETENTION": None}


@dataclass(frozen=True)
class Sizes:
    throughput: int = 20_000
    #: Ten-step procedures of the steps and observability benchmarks: 50,000 steps, about 12 s a variant at
    #: 4,000 steps/s (at 2,000 procedures a variant took 5 s and its ratio to the baseline spread 0.79-1.10).
    steps_procedures: int = 5_000
    pickup: int = 200
    pickup_rate: float = 20.0
    backlog_finished: int = 1_000_000
    backlog_future: int = 100_000
    backlog_drain: int = 20_000
    tree_parents: int = 200
    tree_children: int = 20
    schedules: int = 10_000
    #: No-op tasks per task throughput run (the tasks benchmark; also the peers' N with --peers).
    tasks: int = 20_000
    #: Old finished procedures the retention benchmark prunes (and prunes beside a drain of ``throughput``).
    retention_procedures: int = 200_000
    #: Procedures of the history benchmark's seeded side; its admin baseline; its drain; requests per page.
    history_procedures: int = 10_000_000
    history_baseline: int = 10_000
    history_drain: int = 20_000
    history_requests: int = 5
    #: Seconds an idle window lasts (the idle commit rate, the idle CPU).
    idle_window: float = 10.0
    #: Seconds to let started workers settle before an idle window (PostgreSQL flushes an idle
    #: session's statistics within 10 s).
    settle: float = 11.0
    #: Longest wait for a drain, in seconds.
    timeout: float = 900.0
    #: The fleet (benchmarks/fleet.py): worker processes x threads, PgBouncer's server connections, procedures.
    fleet_workers: int = 8
    fleet_threads: int = 8
    fleet_pool: int = 20
    fleet_procedures: int = 10_000
    #: The timers benchmark: sleeps timed one at a time (at ``pickup_rate``); sleepers due in the same instant,
    #: and how far ahead of it they are seeded.
    timer_precision: int = 200
    timers_burst: int = 10_000
    timers_lead: float = 5.0
    #: The sleepers benchmark: procedures sleeping beside the drain, and the drain.
    sleepers: int = 1_000_000
    sleepers_drain: int = 20_000
    #: The events benchmark: procedures waiting for an event, and the rate their events are sent at one at a time.
    events: int = 1_000
    events_rate: float = 25.0
    #: The async benchmark: procedures awaiting 1 s of I/O on one worker; no-op async (and sync) procedures.
    async_io: int = 1_000
    async_noops: int = 20_000
    #: The limits benchmark (benchmarks/limits.py): no-ops per side of the non-binding limit's pair; the keys
    #: limited to 1, the procedures per key, their step's seconds, and the workers x threads that drain them;
    #: the rate (claims per second), the seconds it is held, and its workers.
    limits_drain: int = 5_000
    limits_keys: int = 20
    limits_per_key: int = 100
    limits_step: float = 0.05
    limits_workers: int = 8
    limits_threads: int = 4
    limits_rate: int = 200
    limits_rate_seconds: int = 30
    limits_rate_workers: int = 4



@dataclass
class Metric:
    """One line of the table: a figure measured once per run."""

    benchmark: str
    metric: str
    unit: str
    values: list[float] = field(default_factory=list)
    target: str = ""
    #: Whether the median meets the target (None: no target).
    meets: Callable[[float], bool] | None = None
    digits: int = 0
    note: str = ""


@dataclass
class Context:
    server: Server
    databases: Databases
    sizes: Sizes
    runs: int
    threads: int
    log_dir: Path
    profile: Path | None = None
    progress: Callable[[str], None] = print
    details: list[str] = field(default_factory=list)
    #: Also run the peers (``--peers``): each benchmark that has one runs it beside ours, in the same run.
    peers: bool = False

    def url(self, dbname: str) -> str:
        return self.server.url(dbname)

    def workers(self, dbname: str) -> Workers:
        return Workers(self.url(dbname), self.log_dir, profile=self.profile, server=self.server, dbname=dbname)


def submit(cls: Any, states: Sequence[dict[str, Any]]) -> None:
    """Submit ``states`` with ``submit_many`` in one transaction (one commit)."""
    from django.db import transaction

    with transaction.atomic():
        for start in range(0, len(states), SUBMIT_CHUNK):
            cls.submit_many(states[start:start + SUBMIT_CHUNK])


def checkpoint() -> None:
    """Flush what setting up wrote (a copied template, the submitted rows) before a drain is timed.

    Otherwise the checkpoint that WAL sets off can land in the middle of one drain of a pair and not
    the other (the backlog's 1.1-million-row template is a gigabyte); the peers' harness does the same.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")


def now() -> Any:
    from django.utils import timezone

    return timezone.now()


@dataclass
class Drain:
    rate: float  # procedures/s from worker start to the last finish
    steady: float  # procedures/s from the first claim to the last finish
    commits: float  # commits per procedure over the workers' whole life (start-up and burst tail included)
    rss_mb: float  # largest worker RSS after the drain
    peak_mb: float  # largest worker peak RSS (VmHWM)
    worker_cpu_ms: float  # worker CPU per procedure (all worker processes, start-up included)
    db_cpu_ms: float  # PostgreSQL backend CPU per procedure (nan when not measurable)
    wal_bytes: float  # WAL per procedure
    reads: float  # blocks read from outside shared buffers per procedure


def drain_noops(ctx: Context, label: str, n: int, workers: int, template: str | None = None,
                settings: dict[str, Any] | None = None, db: str | None = None,
                fill: Callable[[int], None] | None = None) -> Drain:
    """Submit ``n`` no-op procedures (or let ``fill(n)`` enqueue ``n`` no-op runs), then time ``workers`` burst
    workers (with ``settings``) draining them.

    In a fresh database (copied from ``template``), or in ``db`` if given (already connected).
    """
    if db is not None:
        return _drain_noops_in(ctx, db, n, workers, settings, fill)
    with ctx.databases.fresh(label, template) as fresh:
        return _drain_noops_in(ctx, fresh, n, workers, settings, fill)


@dataclass
class Burst:
    """What :func:`run_burst` saw: the workers (with their stats and the pool's CPU readings), the commits
    they made, and the first and last finish of the runs submitted since the drain's start."""

    started: list[Any]
    pool: Any
    commits: int
    first: float
    last: float
    #: Bytes of WAL written while the workers ran (the server's: nothing else should be writing). It counts
    #: every row and index entry written, and does not depend on how fast or busy the machine is.
    wal: int
    #: Blocks the database's backends read from outside shared buffers meanwhile: pages a drain touched that
    #: were not cached, as when its rows are spread over a table larger than the buffers.
    reads: int

    @property
    def t0(self) -> float:
        """When the first worker started: throughput "from worker start" counts from here."""
        return min(w.started for w in self.started)


def run_burst(ctx: Context, db: str, since: Any, expected: int, workers: int, **start: Any) -> Burst:
    """Start ``workers`` burst workers on ``db`` (``start``: more ``pool.start`` arguments), wait for them to
    exit, and check that the ``expected`` runs submitted since ``since`` all finished."""
    close_connection()
    ctx.server.wait_disconnected(db)
    before, lsn, read = ctx.server.xact_commit(db), ctx.server.wal_lsn(), ctx.server.blocks_read(db)
    with ctx.workers(db) as pool:
        started = pool.start(workers, concurrency=ctx.threads, burst=True, **start)
        pool.wait_exit(started, ctx.sizes.timeout)
    ctx.server.wait_disconnected(db)
    commits, wal = ctx.server.xact_commit(db) - before, ctx.server.wal_since(lsn)
    reads = ctx.server.blocks_read(db) - read
    count, first, last = finished_span(since)
    if count != expected:
        raise BenchmarkError(f"expected {expected} procedures, found {count}")
    return Burst(started, pool, commits, first, last, wal, reads)


def _drain_noops_in(ctx: Context, db: str, n: int, workers: int, settings: dict[str, Any] | None,
                    fill: Callable[[int], None] | None) -> Drain:
    from benchmarks.procedures import Noop

    since = now()
    if fill is None:
        submit(Noop, [{}] * n)
    else:
        fill(n)
    checkpoint()
    run = run_burst(ctx, db, since, n, workers, settings=settings)
    db_cpu = run.pool.database_cpu()
    return Drain(rate=n / (run.last - run.t0), steady=n / (run.last - run.first), commits=run.commits / n,
                 rss_mb=max(w.last.rss_kb for w in run.started) / 1024,
                 peak_mb=max(w.last.hwm_kb for w in run.started) / 1024,
                 worker_cpu_ms=run.pool.worker_cpu() / n * 1000,
                 db_cpu_ms=db_cpu / n * 1000 if db_cpu is not None else float("nan"), wal_bytes=run.wal / n,
                 reads=run.reads / n)

@dataclass
class Pickup:
    latencies: list[float]  # ms from each submit's commit to its step's start
    woken: list[float]  # ms from each submit's commit to the worker's claim
    handed: list[float]  # ms from each claim to its step's start
    idle_cpu: float  # % of a core, the busier of the idle workers before the submits


def measure_pickup(ctx: Context, db: str, settings: dict[str, Any] | None = None, *,
                   submit: Callable[[int], Any] | None = None, type_name: str | None = None) -> Pickup:
    """Start 2 idle workers on ``db`` and submit ``ctx.sizes.pickup`` runs one at a time.

    ``submit(i)`` makes the i-th run and returns its id; its output must hold ``"started"`` (the worker's
    clock when it ran), and ``type_name`` is the runs' type. Default: ``Stamp`` procedures.
    """
    from django.db import connection, transaction

    from benchmarks.procedures import Stamp
    from django_procedures.models import ProcedureRun

    if submit is None:
        submit, type_name = (lambda i: Stamp.submit({"i": i}).id), Stamp.type_name

    n, rate, t = ctx.sizes.pickup, ctx.sizes.pickup_rate, ctx.threads
    with ctx.workers(db) as pool:
        connection.ensure_connection()
        started = pool.start(2, concurrency=t, burst=False, settings=settings)
        pool.wait_idle(ctx.server, db, 2)
        time.sleep(ctx.sizes.settle)
        cpu0, t0 = [w.cpu_seconds() for w in started], time.monotonic()
        time.sleep(ctx.sizes.idle_window)
        cpu1, t1 = [w.cpu_seconds() for w in started], time.monotonic()
        cpu = max(b - a for a, b in zip(cpu0, cpu1, strict=True)) / (t1 - t0) * 100
        committed: dict[str, float] = {}
        begin = time.monotonic()
        for i in range(n):
            delay = begin + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with transaction.atomic():
                run_id = submit(i)
            committed[str(run_id)] = time.time()
        wait_until_done(n, timeout=ctx.sizes.timeout, workers=pool, type_name=type_name)
        rows = ProcedureRun.objects.filter(id__in=list(committed)).values_list("id", "output", "started_at")
        outputs = {str(pid): (output["started"], claimed.timestamp()) for pid, output, claimed in rows}
    # started_at is the worker's clock just before its claim transaction: where the time goes.
    return Pickup(latencies=[(outputs[pid][0] - at) * 1000 for pid, at in committed.items()],
                  woken=[(outputs[pid][1] - at) * 1000 for pid, at in committed.items()],
                  handed=[(outputs[pid][0] - outputs[pid][1]) * 1000 for pid in committed], idle_cpu=cpu)

def seed_backlog(finished: int, future: int, *, in_order: bool = False) -> None:
    """``finished`` done procedures (each with its Step and Lease row) and ``future`` ready ones due later.

    The finished ones end at random times over 60 days, or ``in_order``: the later inserted, the later
    finished, as procedures that ran one after another are laid out in the table.
    """
    from django.db import connection

    from benchmarks.procedures import Noop
    from django_procedures.models import Lease, ProcedureRun, Step

    ages = "(%(n)s - g) * interval '60 days' / %(n)s" if in_order else "random() * interval '60 days'"
    insert_rows(ProcedureRun, {
        "id": "gen_random_uuid()", "type_name": "%(type)s", "status": "'done'", "step": "1", "step_name": "''",
        "lease_token": "1", "output": "NULL", "run_at": "s.at", "created_at": "s.at", "started_at": "s.at",
        "finished_at": "s.at + interval '5 milliseconds'", "step_started_at": "s.at",
    }, source=f"(SELECT now() - interval '1 day' - {ages} AS at FROM generate_series(1, %(n)s) AS g) AS s",
       n=finished, type=Noop.type_name)
    insert_rows(ProcedureRun, {
        "id": "gen_random_uuid()", "type_name": "%(type)s", "status": "'ready'", "step_name": "'run'",
        "run_at": "now() + interval '1 day' + random() * interval '30 days'", "created_at": "now() - interval '1 hour'",
    }, source="generate_series(1, %(n)s) AS g", n=future, type=Noop.type_name)
    run = ProcedureRun._meta.db_table
    insert_rows(Step, {
        "procedure_id": "r.id", "index": "0", "name": "'run'", "attempt": "1", "status": "'done'",
        "lease_token": "1", "started_at": "r.started_at", "finished_at": "r.finished_at", "error": "''",
        "state": "'{}'::jsonb"}, source=f"{run} AS r WHERE r.status = 'done'")
    insert_rows(Lease, {
        "procedure_id": "r.id", "token": "1", "worker": "'seed'", "claimed_at": "r.started_at",
        "expires_at": "r.started_at + interval '30 seconds'", "released_at": "r.finished_at",
        "outcome": "'completed'"}, source=f"{run} AS r WHERE r.status = 'done'")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


def insert_rows(model: Any, exprs: dict[str, str], *, source: str, **params: Any) -> None:
    """``INSERT INTO <model's table> SELECT … FROM <source>``: ``exprs`` per column, the field's default otherwise.

    A column with neither an expression nor a default (nor NULL allowed) is an
    error naming it, so a column added later shows up here, not as a bad seed.
    """
    from django.db import connection
    from django.db.models import NOT_PROVIDED

    columns, values = [], []
    for f in model._meta.concrete_fields:
        if f.primary_key and f.get_internal_type().endswith("AutoField"):
            continue  # the sequence numbers it
        columns.append(connection.ops.quote_name(f.column))
        if f.column in exprs:
            values.append(exprs[f.column])
        elif f.default is not NOT_PROVIDED or (f.empty_strings_allowed and not f.null):  # e.g. a blank text
            key = f"default_{f.column}"
            params[key] = f.get_db_prep_save(f.get_default(), connection)
            values.append(f"%({key})s")
        elif f.null:
            values.append("NULL")
        else:
            raise BenchmarkError(f"seeding {model.__name__}: no value for the column {f.column!r}; "
                                 "add it to the benchmark's seed expressions")
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) "
                       f"SELECT {', '.join(values)} FROM {source}", params)

