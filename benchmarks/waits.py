"""Benchmarks of durable waits (issue 26): timers firing on time, many at once, and sleepers the claim skips.

``timers`` has 2 idle workers sleep ``SleepThenStamp`` procedures and measures
how late each second step starts after its wake time: one at a time, spread
out (the precision of a timer with the workers idle in between, and their idle
CPU meanwhile), and ``Sizes.timers_burst`` seeded asleep and due in the same instant (how
long until the last one ran: split into the wake passes, the first claim and the drain's rate),
paired with as many ready no-ops submitted at once to the same workers (the floor: what those
workers take for that many runs when no wake pass is needed). ``sleepers`` drains no-op procedures beside
``Sizes.sleepers`` sleeping ones, paired with the same drain beside none: the
claim must not scan the sleeping rows (they sit in their own partial index).
"""

from __future__ import annotations

import random
import time
from datetime import timedelta
from typing import Any

from benchmarks.common import KEEP_HISTORY, Context, Drain, Metric, drain_noops, insert_rows, now
from benchmarks.harness import BenchmarkError, percentile, wait_until_done


def _lateness(type_name: str, since: Any) -> list[float]:
    """Milliseconds from the wake time (its state's ``until``) of each run submitted since ``since`` and finished
    to its second step's start."""
    from datetime import datetime

    from django_procedures.models import ProcedureRun

    rows = (ProcedureRun.objects.filter(type_name=type_name, status="done", created_at__gte=since)
            .values_list("state", "output"))
    return [(output["started"] - datetime.fromisoformat(state["until"]).timestamp()) * 1000
            for state, output in rows]


def _idle_cpu(ctx: Context, workers: list[Any]) -> float:
    """The busier worker's CPU over an idle window, in % of a core."""
    cpu0, t0 = [w.cpu_seconds() for w in workers], time.monotonic()
    time.sleep(ctx.sizes.idle_window)
    cpu1, t1 = [w.cpu_seconds() for w in workers], time.monotonic()
    return max(b - a for a, b in zip(cpu0, cpu1, strict=True)) / (t1 - t0) * 100


def timers(ctx: Context) -> list[Metric]:
    from django.db import connection, transaction

    from benchmarks.procedures import SleepThenStamp
    from django_procedures.store.notify import notify

    s, t = ctx.sizes, ctx.threads
    p50, p99, worst, cpu, burst_last, burst_p99 = [], [], [], [], [], []
    burst_woken, burst_first, burst_rate, ready_last = [], [], [], []
    for run in range(ctx.runs):
        with ctx.databases.fresh(f"timers_{run}") as db, ctx.workers(db) as pool:
            connection.ensure_connection()
            started = pool.start(2, concurrency=t, burst=False, settings=KEEP_HISTORY)
            pool.wait_idle(ctx.server, db, 2)
            # A thousand timers far off first (all asleep before anything is timed): sleeping work must not make
            # the idle workers poll, nor slow the timers that come due.
            with transaction.atomic():
                seed_sleepers(1000, wake_at=now() + timedelta(hours=1))
                notify(["default"])
            # Spread: each sleeps 1-3 s from its submit, submitted at pickup_rate; the workers idle in between.
            rng = random.Random(run)
            n, since = s.timer_precision, now()
            begin = time.monotonic()
            for i in range(n):
                delay = begin + i / s.pickup_rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                until = now() + timedelta(seconds=rng.uniform(1.0, 3.0))
                SleepThenStamp.submit({"until": until.isoformat()})
            wait_until_done(n, timeout=s.timeout, workers=pool, type_name=SleepThenStamp.type_name)
            late = _lateness(SleepThenStamp.type_name, since)
            time.sleep(s.settle)
            cpu.append(_idle_cpu(ctx, started))
            # Burst: timers_burst sleepers all due at one instant, seeded asleep (as Status.sleep leaves them) and
            # announced as a sleep announces itself (a NOTIFY of its queue: the idle workers read the due time).
            since = now()
            due = now() + timedelta(seconds=s.timers_lead)
            with transaction.atomic():
                seed_sleepers(s.timers_burst, wake_at=due)
                notify(["default"])
            asleep = (due - now()).total_seconds()
            woken_after = _watch_wake(SleepThenStamp.type_name, due, s.timeout)
            wait_until_done(n + s.timers_burst, timeout=s.timeout, workers=pool, type_name=SleepThenStamp.type_name)
            burst = _lateness(SleepThenStamp.type_name, since)
            first_claim, rate = _burst_drain(SleepThenStamp.type_name, since, due)
            floor = _ready_at_once(s.timers_burst, s.timeout, pool)
        p50.append(percentile(late, 50))
        p99.append(percentile(late, 99))
        worst.append(max(late))
        burst_last.append(max(burst) / 1000)
        burst_p99.append(percentile(burst, 99) / 1000)
        burst_woken.append(woken_after)
        burst_first.append(first_claim)
        burst_rate.append(rate)
        ready_last.append(floor)
        ctx.progress(f"  timers run {run + 1}: {n} spread timers late by p50 {p50[-1]:.1f} ms, p99 {p99[-1]:.1f} ms, "
                     f"max {worst[-1]:.1f} ms; idle CPU {cpu[-1]:.2f}% of a core with 1,000 sleeping; "
                     f"{s.timers_burst:,} due at once (all asleep {asleep:.1f}s before): the last ran "
                     f"{burst_last[-1]:.2f}s after its wake time (none left asleep after {woken_after:.2f}s, the "
                     f"first claimed after {first_claim:.2f}s, then {rate:,.0f}/s from the first claim to the last "
                     f"finish); as many ready no-ops submitted at once: the last ran {floor:.2f}s after the submit")
    what = f"{s.timer_precision} sleeps of 1-3 s, 2 idle workers x {t} threads"
    return [
        Metric("14 timers", f"lateness p50 (second step start - wake time), {what}", "ms", p50, digits=1),
        Metric("14 timers", "lateness p99", "ms", p99, "≤ 100", lambda v: v <= 100, digits=1),
        Metric("14 timers", "lateness max", "ms", worst, digits=1),
        Metric("14 timers", f"idle worker CPU over {s.idle_window:g}s, 1,000 sleeping (busier of the two)",
               "% of a core", cpu, "< 1", lambda v: v < 1, digits=2),
        Metric("14 timers", f"{s.timers_burst:,} timers due in the same instant: last one's second step, after",
               "s", burst_last, "≤ 5", lambda v: v <= 5, digits=2),
        Metric("14 timers", "same, p99", "s", burst_p99, digits=2),
        Metric("14 timers", "same: the wake passes, until none is left asleep, after", "s", burst_woken, digits=2),
        Metric("14 timers", "same: the first second step claimed, after", "s", burst_first, digits=2),
        Metric("14 timers", "same: from the first claim to the last finish", "procedures/s", burst_rate),
        Metric("14 timers", f"the floor: {s.timers_burst:,} ready one-step no-ops submitted at once to the same "
               "workers, the last one's step after the submit's commit", "s", ready_last, digits=2),
        Metric("14 timers", "timers due at once / ready no-ops submitted at once (paired, same workers)", "ratio",
               [b / f for b, f in zip(burst_last, ready_last, strict=True)], digits=2),
    ]


def _ready_at_once(count: int, timeout: float, pool: Any) -> float:
    """Submit ``count`` ``Stamp`` procedures in one commit to ``pool``'s idle workers: seconds from the commit
    to the last one's step start (what the same workers take for as many runs that need no wake pass)."""
    from benchmarks.common import submit
    from benchmarks.procedures import Stamp
    from django_procedures.models import ProcedureRun

    since = now()
    submit(Stamp, [{}] * count)
    committed = time.time()
    wait_until_done(count, timeout=timeout, workers=pool, type_name=Stamp.type_name)
    started = ProcedureRun.objects.filter(type_name=Stamp.type_name, created_at__gte=since).values_list(
        "output", flat=True)
    return max(output["started"] for output in started) - committed


def _watch_wake(type_name: str, due: Any, timeout: float) -> float:
    """Seconds from ``due`` until no procedure of ``type_name`` due by then sleeps any more (polled every 20 ms
    through ``procedures_wake_idx``: the rows it reads shrink as they wake)."""
    from django_procedures.models import ProcedureRun

    asleep = ProcedureRun.objects.filter(type_name=type_name, status="waiting", wake_at__lte=due)
    deadline = time.monotonic() + timeout
    while asleep.exists():
        if time.monotonic() > deadline:
            raise BenchmarkError(f"{asleep.count()} sleepers still asleep after {timeout:.0f}s")
        time.sleep(0.02)
    return (now() - due).total_seconds()


def _burst_drain(type_name: str, since: Any, due: Any) -> tuple[float, float]:
    """For the runs of ``type_name`` created since ``since`` (seeded asleep: their one lease is their second
    step's): seconds from ``due`` to the first claim, and procedures/s from the first claim to the last finish."""
    from django.db.models import Count, Max, Min

    from django_procedures.models import Lease, ProcedureRun

    runs = ProcedureRun.objects.filter(type_name=type_name, created_at__gte=since)
    span = runs.aggregate(n=Count("id"), last=Max("finished_at"))
    first = Lease.objects.filter(procedure_id__in=runs.values("id")).aggregate(at=Min("claimed_at"))["at"]
    return (first - due).total_seconds(), span["n"] / (span["last"] - first).total_seconds()


def seed_sleepers(count: int, wake_at: Any = None) -> None:
    """``count`` ``SleepThenStamp`` procedures asleep before their second step, as ``Status.sleep`` leaves them:
    until ``wake_at``, or until some time in the next 30 days."""
    import json

    from benchmarks.procedures import SleepThenStamp
    from django_procedures.models import ProcedureRun

    wake = "%(wake_at)s" if wake_at is not None else "now() + interval '1 day' + random() * interval '30 days'"
    state = json.dumps({"until": (wake_at or now() + timedelta(days=100)).isoformat()})
    insert_rows(ProcedureRun, {
        "id": "gen_random_uuid()", "type_name": "%(type)s", "status": "'waiting'", "step": "1",
        "step_name": "'stamp'", "waiting_for": "'timer'", "state": "%(state)s::jsonb", "wake_at": wake,
        "run_at": wake, "created_at": "now()", "started_at": "now()",
    }, source="generate_series(1, %(n)s) AS g", n=count, type=SleepThenStamp.type_name, wake_at=wake_at, state=state)


def _seed_sleepers_and_analyze(count: int) -> None:
    from django.db import connection

    from django_procedures.models import ProcedureRun

    seed_sleepers(count)
    # The seeded table only: a whole-database ANALYZE would also record the (still empty) lease table as empty,
    # which the side with no sleepers never does; a worker's prepared finish then caches a generic plan that
    # scans every lease (a sequential scan of a table "known" empty), and the drain slowed with its own leases
    # (1,000/s against 1,560/s with the lease table left unanalyzed, 20,000 no-ops), which is not the sleepers.
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {ProcedureRun._meta.db_table}")


def sleepers(ctx: Context) -> list[Metric]:
    s = ctx.sizes
    ctx.progress(f"  seeding {s.sleepers:,} sleeping procedures (once; each run copies the seeded database)")
    t = time.monotonic()
    seeded = ctx.databases.template("sleepers", lambda: _seed_sleepers_and_analyze(s.sleepers))
    ctx.progress(f"  seeded in {time.monotonic() - t:.0f}s")
    empty, full, ratio = [], [], []
    for run in range(ctx.runs):
        drains: dict[str, Drain] = {}
        for side in ("empty", "full") if run % 2 == 0 else ("full", "empty"):
            template = seeded if side == "full" else None
            drains[side] = drain_noops(ctx, f"sleepers_{side}_{run}", s.sleepers_drain, 2, template=template,
                                       settings=KEEP_HISTORY)
        e, f = drains["empty"], drains["full"]
        empty.append(e.rate)
        full.append(f.rate)
        ratio.append(f.rate / e.rate * 100)
        ctx.progress(f"  sleepers run {run + 1}: none sleeping {e.rate:,.0f}/s, beside {s.sleepers:,} sleeping "
                     f"{f.rate:,.0f}/s ({ratio[-1]:.0f}%); CPU per procedure, workers + PostgreSQL: "
                     f"{e.worker_cpu_ms:.2f} + {e.db_cpu_ms:.2f} ms vs {f.worker_cpu_ms:.2f} + {f.db_cpu_ms:.2f} ms")
    what = f"{s.sleepers_drain:,} no-op procedures, 2 workers x {ctx.threads} threads"
    return [
        Metric("15 sleepers", f"{what}, none sleeping", "procedures/s", empty),
        Metric("15 sleepers", f"same, beside {s.sleepers:,} sleeping procedures", "procedures/s", full),
        Metric("15 sleepers", "beside sleepers / none (paired runs)", "%", ratio, "≥ 90", lambda v: v >= 90),
    ]
