"""The benchmarks: each run gets its own fresh database and real worker processes.

Every benchmark returns :class:`Metric` rows, one value per run; the runner
turns them into the table (median and min-max over the runs). What benchmarks
share (sizes, context, drains, seeding) is in ``benchmarks/common.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

from benchmarks import async_steps, events, history, limits, observability, waits
from benchmarks.common import (
    KEEP_HISTORY,
    Context,
    Drain,
    Metric,
    Sizes,
    drain_noops,
    measure_pickup,
    now,
    seed_backlog,
    submit,
)
from benchmarks.fleet import fleet
from benchmarks.harness import BenchmarkError, close_connection, finished_span, percentile, wait_until_done
from benchmarks.task_benchmark import tasks

FULL = Sizes()
QUICK = Sizes(throughput=40, steps_procedures=5, pickup=10, pickup_rate=20.0, backlog_finished=2_000,
              backlog_future=500, backlog_drain=40, tree_parents=2, tree_children=3, schedules=50, tasks=40,
              retention_procedures=2_000, history_procedures=5_000, history_baseline=1_000, history_drain=40,
              history_requests=1,
              idle_window=0.5, settle=0.1, timeout=120.0, fleet_workers=2, fleet_threads=2, fleet_pool=4,
              fleet_procedures=40, timer_precision=10, timers_burst=50, timers_lead=2.0, sleepers=2_000,
              sleepers_drain=40, events=20, events_rate=20.0, async_io=50, async_noops=40, limits_drain=40,
              limits_per_key=3, limits_workers=2, limits_threads=2, limits_rate=20, limits_rate_seconds=3,
              limits_rate_workers=2)



# --------------------------------------------------------------------------- 1. throughput (and 7. memory)


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
            since = now()
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
        since = now()
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


BENCHMARKS: dict[str, Callable[[Context], list[Metric]]] = {
    "throughput": throughput,
    "steps": steps,
    "pickup": pickup,
    "backlog": backlog,
    "trees": trees,
    "schedules": schedules,
    "observability": observability.observability,
    "tasks": tasks,
    "fleet": fleet,
    "retention": history.retention,
    "history": history.history,
    "timers": waits.timers,
    "sleepers": waits.sleepers,
    "events": events.events,
    "async": async_steps.async_steps,
    "limits": limits.limits,
}
#: Benchmarks a run without ``--only`` leaves out (except with ``--quick``): they are run on purpose.
ON_PURPOSE = {"fleet", *history.ON_PURPOSE}

#: ``--only memory`` runs the throughput benchmark, whose workers it measures.
ALIASES = {"memory": "throughput"}
