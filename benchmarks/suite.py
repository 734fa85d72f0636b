"""The benchmarks: each run gets its own fresh database and real worker processes.

Every benchmark returns :class:`Metric` rows, one value per run; the runner
turns them into the table (median and min-max over the runs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks import history, observability
from benchmarks.harness import (
    BenchmarkError,
    Databases,
    Server,
    Workers,
    close_connection,
    finished_span,
    percentile,
    wait_until_done,
)

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


FULL = Sizes()
QUICK = Sizes(throughput=40, steps_procedures=5, pickup=10, pickup_rate=20.0, backlog_finished=2_000,
              backlog_future=500, backlog_drain=40, tree_parents=2, tree_children=3, schedules=50, tasks=40,
              retention_procedures=2_000, history_procedures=5_000, history_baseline=1_000, history_drain=40,
              history_requests=1,
              idle_window=0.5, settle=0.1, timeout=120.0, fleet_workers=2, fleet_threads=2, fleet_pool=4,
              fleet_procedures=40)


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


def _now() -> Any:
    from django.utils import timezone

    return timezone.now()


# --------------------------------------------------------------------------- 1. throughput (and 7. memory)


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

    since = _now()
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


def throughput(ctx: Context) -> list[Metric]:
    n, t = ctx.sizes.throughput, ctx.threads
    rows: dict[int, list[Drain]] = {1: [], 2: []}
    for run in range(ctx.runs):
        for workers in (1, 2):
            d = drain_noops(ctx, f"throughput_{workers}w_{run}", n, workers)
            ctx.progress(f"  throughput run {run + 1}: {workers} worker(s) x {t} threads: {d.rate:,.0f}/s "
                         f"({d.steady:,.0f}/s from the first claim), {d.commits:.2f} commits/procedure, "
                         f"CPU/procedure: worker {d.worker_cpu_ms:.2f} ms + PostgreSQL {d.db_cpu_ms:.2f} ms, "
                         f"WAL {d.wal_bytes:,.0f} bytes/procedure, RSS {d.rss_mb:.0f} MB (peak {d.peak_mb:.0f} MB)")
            rows[workers].append(d)
    one, two = rows[1], rows[2]
    return [
        Metric("1 throughput", f"{n:,} no-op procedures, 1 worker x {t} threads", "procedures/s",
               [d.rate for d in one], "≥ 1,500", lambda v: v >= 1500),
        Metric("1 throughput", "same, from the first claim (start-up excluded)", "procedures/s",
               [d.steady for d in one]),
        Metric("1 throughput", f"{n:,} no-op procedures, 2 workers x {t} threads", "procedures/s",
               [d.rate for d in two], "≥ 2,500", lambda v: v >= 2500),
        Metric("1 throughput", "same, from the first claim (start-up excluded)", "procedures/s",
               [d.steady for d in two]),
        Metric("1 throughput", "commits per single-step procedure (2 workers, whole worker life)", "commits",
               [d.commits for d in two], "≤ 1.1", lambda v: v <= 1.1, digits=2),
        Metric("1 throughput", "CPU per procedure, worker processes (2 workers)", "ms",
               [d.worker_cpu_ms for d in two], digits=2),
        Metric("1 throughput", "CPU per procedure, PostgreSQL backends (2 workers)", "ms",
               [d.db_cpu_ms for d in two if d.db_cpu_ms == d.db_cpu_ms], digits=2),
        Metric("1 throughput", "WAL per procedure (2 workers; every row and index entry written)", "bytes",
               [d.wal_bytes for d in two]),
        Metric("1 throughput", "capacity of 2 idle cores at that CPU cost: 2000 / (worker + PostgreSQL ms)",
               "procedures/s", [2000 / (d.worker_cpu_ms + d.db_cpu_ms) for d in two if d.db_cpu_ms == d.db_cpu_ms]),
        Metric("7 memory", f"worker RSS after the throughput drain (1 worker x {t} threads)", "MB",
               [d.rss_mb for d in one], "≤ 120", lambda v: v <= 120),
        Metric("7 memory", f"worker peak RSS during the drain (2 workers x {t} threads, largest)", "MB",
               [d.peak_mb for d in two], "≤ 120", lambda v: v <= 120),
    ]


# --------------------------------------------------------------------------- 2. steps


def steps(ctx: Context) -> list[Metric]:
    from django.db import connection

    from benchmarks.procedures import TenSteps

    n, t = ctx.sizes.steps_procedures, ctx.threads
    total = n * len(TenSteps.steps)
    rates, per_step, idle_rates = [], [], []
    for run in range(ctx.runs):
        with ctx.databases.fresh(f"steps_{run}") as db, ctx.workers(db) as pool:
            connection.ensure_connection()  # its set-up is not part of the counted windows
            pool.start(2, concurrency=t, burst=False)
            pool.wait_idle(ctx.server, db, 2)
            time.sleep(ctx.sizes.settle)
            a, ta = ctx.server.xact_commit(db), time.monotonic()
            time.sleep(ctx.sizes.idle_window)
            b, tb = ctx.server.xact_commit(db), time.monotonic()
            idle_rate = (b - a) / (tb - ta)
            since = _now()
            submit(TenSteps, [{}] * n)  # one commit
            t_submit = time.time()
            polls = wait_until_done(n, timeout=ctx.sizes.timeout, workers=pool)
            pool.stop_all()
            tc = time.monotonic()
            close_connection()
            ctx.server.wait_disconnected(db)
            c = ctx.server.xact_commit(db)
            drain = (c - b) - 1 - polls - idle_rate * (tc - tb)
            count, _first, last = finished_span(since)
            if count != n:
                raise BenchmarkError(f"expected {n} procedures, found {count}")
        rates.append(total / (last - t_submit))
        per_step.append(drain / total)
        idle_rates.append(idle_rate)
        ctx.progress(f"  steps run {run + 1}: {rates[-1]:,.0f} steps/s, {per_step[-1]:.3f} commits/step "
                     f"(counted {c - b:,}, minus the submit, {polls} polls and {idle_rate:.2f}/s idle "
                     f"over {tc - tb:.1f}s)")
    return [
        Metric("2 steps", f"{n:,} procedures x 10 steps, 2 idle workers x {t} threads", "steps/s", rates),
        Metric("2 steps", "commits per step (drain only, idle rate subtracted)", "commits", per_step,
               "≤ 1.1", lambda v: v <= 1.1, digits=3),
        Metric("2 steps", "idle commit rate of 2 workers before the drain", "commits/s", idle_rates, digits=2),
    ]


# --------------------------------------------------------------------------- 3. pickup latency


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


def pickup(ctx: Context) -> list[Metric]:
    n, rate, t = ctx.sizes.pickup, ctx.sizes.pickup_rate, ctx.threads
    p50, p95, p99, cpu, wake, handoff, wake99, handoff99 = [], [], [], [], [], [], [], []
    for run in range(ctx.runs):
        with ctx.databases.fresh(f"pickup_{run}") as db:
            measured = measure_pickup(ctx, db)
        latencies, woken, handed = measured.latencies, measured.woken, measured.handed
        cpu.append(measured.idle_cpu)
        wake.append(percentile(woken, 50))
        handoff.append(percentile(handed, 50))
        wake99.append(percentile(woken, 99))
        handoff99.append(percentile(handed, 99))
        p50.append(percentile(latencies, 50))
        p95.append(percentile(latencies, 95))
        p99.append(percentile(latencies, 99))
        ctx.progress(f"  pickup run {run + 1}: p50 {p50[-1]:.1f} ms, p95 {p95[-1]:.1f} ms, p99 {p99[-1]:.1f} ms, "
                     f"max {max(latencies):.1f} ms (p50/p99 {wake[-1]:.1f}/{wake99[-1]:.1f} ms to wake and start "
                     f"claiming, {handoff[-1]:.1f}/{handoff99[-1]:.1f} ms to claim and hand over; slowest: "
                     f"{_slowest(latencies, woken, handed)}); idle worker CPU {cpu[-1]:.2f}% of a core")
    what = f"{n} submitted one at a time at {rate:g}/s, 2 idle workers x {t} threads"
    return [
        Metric("3 pickup", f"p50 (step start - submit commit), {what}", "ms", p50, "≤ 3", lambda v: v <= 3,
               digits=1),
        Metric("3 pickup", "p95", "ms", p95, digits=1),
        Metric("3 pickup", "p99", "ms", p99, "≤ 10", lambda v: v <= 10, digits=1),
        Metric("3 pickup", "p50 of its first part: submit commit -> the worker starts its claim", "ms", wake,
               digits=1),
        Metric("3 pickup", "p50 of its second part: claim transaction and hand-over -> step starts", "ms", handoff,
               digits=1),
        Metric("3 pickup", "p99 of its first part (wake-up)", "ms", wake99, digits=1),
        Metric("3 pickup", "p99 of its second part (claim and hand-over)", "ms", handoff99, digits=1),
        Metric("3 pickup", f"idle worker CPU over {ctx.sizes.idle_window:g}s (busier of the two)",
               "% of a core", cpu, "< 1", lambda v: v < 1, digits=2),
    ]


def _slowest(latencies: list[float], woken: list[float], handed: list[float], count: int = 3) -> str:
    """The ``count`` slowest pickups split into their two parts (wake-up + claim and hand-over), in ms."""
    worst = sorted(range(len(latencies)), key=latencies.__getitem__, reverse=True)[:count]
    return ", ".join(f"{latencies[i]:.1f} = {woken[i]:.1f} + {handed[i]:.1f}" for i in worst)


# --------------------------------------------------------------------------- 4. backlog


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


def backlog(ctx: Context) -> list[Metric]:
    s = ctx.sizes
    ctx.progress(f"  seeding {s.backlog_finished:,} finished and {s.backlog_future:,} future-dated ready "
                 "procedures (once; each run copies the seeded database)")
    t = time.monotonic()
    seeded = ctx.databases.template("backlog", lambda: seed_backlog(s.backlog_finished, s.backlog_future))
    ctx.progress(f"  seeded in {time.monotonic() - t:.0f}s")
    empty, full, ratio, cpu_ratio = [], [], [], []
    for run in range(ctx.runs):
        drains: dict[str, Drain] = {}
        # Neither side always goes first; retention off on both: this measures claims beside the backlog (the
        # retention benchmark measures pruning).
        for side in ("empty", "full") if run % 2 == 0 else ("full", "empty"):
            template = seeded if side == "full" else None
            drains[side] = drain_noops(ctx, f"backlog_{side}_{run}", s.backlog_drain, 2, template=template,
                                       settings=KEEP_HISTORY)
        e, f = drains["empty"], drains["full"]
        empty.append(e.rate)
        full.append(f.rate)
        ratio.append(f.rate / e.rate * 100)
        if e.db_cpu_ms == e.db_cpu_ms and f.db_cpu_ms == f.db_cpu_ms:
            cpu_ratio.append((e.worker_cpu_ms + e.db_cpu_ms) / (f.worker_cpu_ms + f.db_cpu_ms) * 100)
        ctx.progress(f"  backlog run {run + 1}: empty table {e.rate:,.0f}/s, with backlog {f.rate:,.0f}/s "
                     f"({ratio[-1]:.0f}%); CPU per procedure, workers + PostgreSQL: empty {e.worker_cpu_ms:.2f} + "
                     f"{e.db_cpu_ms:.2f} ms, backlog {f.worker_cpu_ms:.2f} + {f.db_cpu_ms:.2f} ms")
    what = f"{s.backlog_drain:,} no-op procedures, 2 workers x {ctx.threads} threads"
    return [
        Metric("4 backlog", f"{what}, empty table", "procedures/s", empty),
        Metric("4 backlog", f"same, beside {s.backlog_finished:,} finished and {s.backlog_future:,} future ready",
               "procedures/s", full),
        Metric("4 backlog", "backlog / empty (paired runs)", "%", ratio, "≥ 90", lambda v: v >= 90),
        Metric("4 backlog", "backlog / empty, worst run (the target holds in every run)", "%",
               [min(ratio)], "≥ 90", lambda v: v >= 90),
        # CPU per procedure does not depend on what else the machine runs, as a drain's rate does.
        Metric("4 backlog", "CPU per procedure (workers + PostgreSQL), empty / backlog (paired runs)", "%",
               cpu_ratio),
    ]


# --------------------------------------------------------------------------- 5. trees


def drain_trees(ctx: Context, label: str, parents: int, children: int) -> float:
    """``parents`` trees of ``children`` no-op leaves drained by 2 burst workers; procedures/s from their start."""
    from benchmarks.procedures import TreeParent

    total = parents * (children + 1)
    with ctx.databases.fresh(label) as db:
        since = _now()
        submit(TreeParent, [{"fanout": children}] * parents)
        close_connection()
        with ctx.workers(db) as pool:
            started = pool.start(2, concurrency=ctx.threads, burst=True)
            pool.wait_exit(started, ctx.sizes.timeout)
        count, _first, last = finished_span(since)
        if count != total:
            raise BenchmarkError(f"expected {total} procedures, found {count}")
        return total / (last - min(w.started for w in started))


def trees(ctx: Context) -> list[Metric]:
    """Both shapes (P x C and C x P), each paired with as many flat no-ops drained just before it: the machine's
    load changes from minute to minute, so the ratio of the pair is the figure that counts."""
    wide, deep = ctx.sizes.tree_parents, ctx.sizes.tree_children
    metrics = []
    for parents, children in ((wide, deep), (deep, wide)):
        total = parents * (children + 1)
        rates, ratios = [], []
        for run in range(ctx.runs):
            flat = drain_noops(ctx, f"trees_flat_{parents}x{children}_{run}", total, 2).rate
            rates.append(drain_trees(ctx, f"trees_{parents}x{children}_{run}", parents, children))
            ratios.append(100 * rates[-1] / flat)
            ctx.progress(f"  trees run {run + 1}: {parents} x {children}: {rates[-1]:,.0f} procedures/s, "
                         f"flat {flat:,.0f}/s: {ratios[-1]:.0f} %")
        metrics += [
            Metric("5 trees", f"{parents} parents x {children} children ({total:,} procedures), "
                   f"2 workers x {ctx.threads} threads", "procedures/s", rates),
            Metric("5 trees", f"same / {total:,} flat no-ops drained just before (paired runs)", "%", ratios,
                   "≥ 50", lambda v: v >= 50),
        ]
    return metrics


# --------------------------------------------------------------------------- 6. schedules


def schedules(ctx: Context) -> list[Metric]:
    from django_procedures import models

    n = ctx.sizes.schedules
    label = f"one tick pass over {n:,} due schedules"
    if not hasattr(models, "Schedule"):
        ctx.progress("  schedules: not available yet (django_procedures.models has no Schedule; issue 4)")
        return [Metric("6 schedules", label, "s", [], "≤ 1", note="not available yet")]
    import django_procedures
    from benchmarks.procedures import Noop

    seconds = []
    for run in range(ctx.runs):
        with ctx.databases.fresh(f"schedules_{run}"):
            for i in range(n):
                django_procedures.register_schedule(f"bench-{i}", Noop, mode="fixed_rate", period=timedelta(hours=1))
            t = time.perf_counter()
            django_procedures.tick()
            seconds.append(time.perf_counter() - t)
        ctx.progress(f"  schedules run {run + 1}: {seconds[-1]:.2f}s")
    return [Metric("6 schedules", label, "s", seconds, "≤ 1", lambda v: v <= 1, digits=2)]


from benchmarks.fleet import fleet  # noqa: E402  (it uses this module's helpers)

BENCHMARKS: dict[str, Callable[[Context], list[Metric]]] = {
    "throughput": throughput,
    "steps": steps,
    "pickup": pickup,
    "backlog": backlog,
    "trees": trees,
    "schedules": schedules,
    "observability": observability.observability,
    "tasks": lambda ctx: _tasks_benchmark(ctx),
    "fleet": fleet,
    "retention": history.retention,
    "history": history.history,
}
#: Benchmarks a run without ``--only`` leaves out (except with ``--quick``): they are run on purpose.
ON_PURPOSE = {"fleet", *history.ON_PURPOSE}


def _tasks_benchmark(ctx: Context) -> list[Metric]:
    from benchmarks.task_benchmark import tasks

    return tasks(ctx)


#: ``--only memory`` runs the throughput benchmark, whose workers it measures.
ALIASES = {"memory": "throughput"}
