"""The flow-control benchmark (docs/flow-control.md, issue 28), measured, never asserted in tests:

- overhead: ``sizes.limits_drain`` no-ops under a concurrency limit none of them reaches
  (``LimitedNoop``: ``Limit.concurrency("bench", 10_000)``) against as many plain ``Noop``\\ s, submitted at
  once to 2 idle long-running workers, paired runs (the side that goes first alternates): limited / unlimited
  throughput (target ≥ 85 %);
- exactness: ``limits_keys`` (20) names limited to 1 each, ``limits_per_key`` ``KeyedSleep`` procedures of
  each (a step sleeping ``limits_step`` s), drained by ``limits_workers`` x ``limits_threads`` (8 x 4)
  long-running workers: the most running at once, counted from the steps' own enter and exit times (each
  step's interval lies inside its slot: it starts after the claim that took the slot committed and ends before
  the transaction that frees it), overall (never more than 20) and per name (never more than 1); throughput
  against the ideal for that limit, ``keys / step`` (target ≥ 80 %);
- rate: ``RatedNoop`` under ``Limit.rate(.., limits_rate, 1)`` with a backlog for ``limits_rate_seconds``
  (30 s) and ``limits_rate_workers`` (4) long-running workers: claims per 1 s window from the leases'
  ``claimed_at`` (the time the rate's log records), every whole window after the first second; target: each
  within ± 5 % of the rate.

The machine these run on is shared: each part reports the load average and the CPU per procedure of the workers
and of their PostgreSQL backends, which the machine's load moves less than a rate.
"""

from __future__ import annotations

import os
from typing import Any

from benchmarks.common import Context, Metric, now, submit
from benchmarks.fleet import _check_room
from benchmarks.harness import BenchmarkError, close_connection, finished_span, wait_until_done

#: Tolerance of the rate target: each window's claims within this fraction of the rate.
RATE_TOLERANCE = 0.05


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def _cpu_ms(pool: Any, n: int) -> tuple[float, float]:
    """(worker, PostgreSQL backend) CPU per procedure in ms, over the workers' whole life (nan: not measurable)."""
    db = pool.database_cpu()
    return pool.worker_cpu() / n * 1000, db / n * 1000 if db is not None else float("nan")


# --------------------------------------------------------------------------- (a) a non-binding limit


def _overhead(ctx: Context, run: int) -> tuple[dict[str, float], dict[str, float]]:
    from benchmarks.procedures import LimitedNoop, Noop

    sides: dict[str, dict[str, float]] = {}
    for side in ("none", "limit") if run % 2 == 0 else ("limit", "none"):
        sides[side] = _drain_idle(ctx, f"limits_{side}_{run}", LimitedNoop if side == "limit" else Noop)
    return sides["none"], sides["limit"]


def _drain_idle(ctx: Context, label: str, cls: type) -> dict[str, float]:
    """``limits_drain`` runs of ``cls`` submitted at once to 2 idle long-running workers: procedures/s from the
    first claim to the last finish, and CPU per procedure of the workers and their PostgreSQL backends.

    Long-running workers, as in the other parts: the figure is the claim path's, not a burst worker's exit.
    """
    from django.db import connection

    n = ctx.sizes.limits_drain
    with ctx.databases.fresh(label) as db, ctx.workers(db) as pool:
        connection.ensure_connection()
        pool.start(2, concurrency=ctx.threads, burst=False)
        pool.wait_idle(ctx.server, db, 2, timeout=ctx.sizes.timeout)
        since = now()
        submit(cls, [{}] * n)
        wait_until_done(n, timeout=ctx.sizes.timeout, workers=pool, type_name=cls.type_name)
        count, first, last = finished_span(since)
        pool.stop_all()
        close_connection()
        worker_ms, db_ms = _cpu_ms(pool, n)
    if count != n:
        raise BenchmarkError(f"expected {n} procedures, found {count}")
    return {"rate": n / (last - first), "worker_ms": worker_ms, "db_ms": db_ms}


# --------------------------------------------------------------------------- (b) 20 keys limited to 1 each


def peak_running(intervals: list[tuple[float, float]]) -> int:
    """The most ``(enter, exit)`` intervals open at one instant (an exit at the very instant of an enter first)."""
    events = sorted([(exit_, -1) for _, exit_ in intervals] + [(enter, 1) for enter, _ in intervals])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def _keyed(ctx: Context, run: int) -> dict[str, float]:
    from django.db import connection

    from benchmarks.procedures import KeyedSleep
    from django_procedures.models import ProcedureRun

    s = ctx.sizes
    n = s.limits_keys * s.limits_per_key
    with ctx.databases.fresh(f"limits_keys_{run}") as db, ctx.workers(db) as pool:
        connection.ensure_connection()
        pool.start(s.limits_workers, concurrency=s.limits_threads, burst=False, label="k")
        pool.wait_idle(ctx.server, db, s.limits_workers, timeout=s.timeout)
        load_before = _load()
        # Keys interleaved, as independent callers would submit them: each name's runs spread through the queue.
        submit(KeyedSleep, [{"key": i % s.limits_keys, "seconds": s.limits_step} for i in range(n)])
        wait_until_done(n, timeout=s.timeout, workers=pool, type_name=KeyedSleep.type_name)
        rows = list(ProcedureRun.objects.filter(type_name=KeyedSleep.type_name)
                    .values_list("status", "state__key", "output"))
        pool.stop_all()
        close_connection()
        worker_ms, db_ms = _cpu_ms(pool, n)
    bad = [status for status, _, _ in rows if status != "done"]
    if bad:
        raise BenchmarkError(f"{len(bad)} of {n} keyed procedures did not end done")
    intervals = [(o["enter"], o["exit"]) for _, _, o in rows]
    by_key: dict[int, list[tuple[float, float]]] = {}
    for _, key, o in rows:
        by_key.setdefault(key, []).append((o["enter"], o["exit"]))
    span = max(e for _, e in intervals) - min(b for b, _ in intervals)
    rate = n / span
    ideal = s.limits_keys / s.limits_step
    return {"peak": peak_running(intervals), "peak_key": max(peak_running(v) for v in by_key.values()),
            "rate": rate, "ideal": ideal, "ratio": rate / ideal * 100, "worker_ms": worker_ms, "db_ms": db_ms,
            "load_before": load_before, "load_after": _load()}


# --------------------------------------------------------------------------- (c) a rate of 200/s


def claims_per_window(times: list[float], first_second: bool = False) -> list[int]:
    """Claims in each whole 1 s window from the first claim, the first second left out (unless
    ``first_second``): the windows the backlog kept full, up to the last whole one."""
    t0 = min(times)
    counts: dict[int, int] = {}
    for t in times:
        counts[int(t - t0)] = counts.get(int(t - t0), 0) + 1
    last = int(max(times) - t0)  # the window of the last claim is cut short: left out
    return [counts.get(i, 0) for i in range(0 if first_second else 1, last)]


def _rated(ctx: Context, run: int) -> dict[str, Any]:
    from django.db import connection

    from benchmarks.procedures import RatedNoop
    from django_procedures.models import Lease, ProcedureRun

    s = ctx.sizes
    # The backlog outlasts the measured seconds by two: the first (a burst) and the last, cut short.
    n = s.limits_rate * (s.limits_rate_seconds + 2)
    with ctx.databases.fresh(f"limits_rate_{run}") as db, ctx.workers(db) as pool:
        connection.ensure_connection()
        pool.start(s.limits_rate_workers, concurrency=ctx.threads, burst=False, label="r")
        pool.wait_idle(ctx.server, db, s.limits_rate_workers, timeout=s.timeout)
        load_before = _load()
        submit(RatedNoop, [{"count": s.limits_rate}] * n)
        wait_until_done(n, timeout=s.timeout, workers=pool, type_name=RatedNoop.type_name)
        runs = ProcedureRun.objects.filter(type_name=RatedNoop.type_name)
        if runs.exclude(status="done").exists():
            raise BenchmarkError("some rated procedures did not end done")
        times = [t.timestamp() for t in Lease.objects.filter(procedure__in=runs).values_list("claimed_at", flat=True)]
        pool.stop_all()
        close_connection()
        worker_ms, db_ms = _cpu_ms(pool, n)
    windows = claims_per_window(times)[:s.limits_rate_seconds]
    if not windows:
        raise BenchmarkError(f"the {n} rated claims spanned less than two seconds")
    lo, hi = s.limits_rate * (1 - RATE_TOLERANCE), s.limits_rate * (1 + RATE_TOLERANCE)
    return {"mean": sum(windows) / len(windows), "min": min(windows), "max": max(windows), "windows": len(windows),
            "within": sum(lo <= w <= hi for w in windows) / len(windows) * 100, "claims": len(times),
            "worker_ms": worker_ms, "db_ms": db_ms, "load_before": load_before, "load_after": _load()}


# --------------------------------------------------------------------------- the benchmark


def limits(ctx: Context) -> list[Metric]:
    s, t = ctx.sizes, ctx.threads
    _check_room(ctx.server, s.limits_workers, s.limits_threads)
    none_rate, limit_rate, ratio, cpu_none, cpu_limit = [], [], [], [], []
    keyed: list[dict[str, float]] = []
    rated: list[dict[str, Any]] = []
    for run in range(ctx.runs):
        load = _load()
        plain, limited = _overhead(ctx, run)
        none_rate.append(plain["rate"])
        limit_rate.append(limited["rate"])
        ratio.append(limited["rate"] / plain["rate"] * 100)
        cpu_none.append(plain["worker_ms"] + plain["db_ms"])
        cpu_limit.append(limited["worker_ms"] + limited["db_ms"])
        ctx.progress(f"  limits run {run + 1}, non-binding limit: {limited['rate']:,.0f}/s against "
                     f"{plain['rate']:,.0f}/s without ({ratio[-1]:.0f} %); CPU per procedure, workers + PostgreSQL: "
                     f"with {limited['worker_ms']:.2f} + {limited['db_ms']:.2f} ms, without "
                     f"{plain['worker_ms']:.2f} + {plain['db_ms']:.2f} ms; load {load} -> {_load()}")
        k = _keyed(ctx, run)
        keyed.append(k)
        ctx.progress(f"  limits run {run + 1}, {s.limits_keys} keys x 1: peak {k['peak']:.0f} running "
                     f"(per key {k['peak_key']:.0f}), {k['rate']:,.0f}/s of an ideal {k['ideal']:,.0f}/s "
                     f"({k['ratio']:.0f} %); CPU per procedure: workers {k['worker_ms']:.2f} ms + PostgreSQL "
                     f"{k['db_ms']:.2f} ms; load {k['load_before']} -> {k['load_after']}")
        r = _rated(ctx, run)
        rated.append(r)
        ctx.progress(f"  limits run {run + 1}, rate {s.limits_rate}/s: {r['windows']} windows of 1 s, mean "
                     f"{r['mean']:.1f}, min {r['min']}, max {r['max']}, {r['within']:.0f} % within ± "
                     f"{RATE_TOLERANCE:.0%}; CPU per procedure: workers {r['worker_ms']:.2f} ms + PostgreSQL "
                     f"{r['db_ms']:.2f} ms; load {r['load_before']} -> {r['load_after']}")
    n, keys, step = s.limits_drain, s.limits_keys, s.limits_step
    shape = f"{s.limits_workers} workers x {s.limits_threads} threads"
    rate, secs = s.limits_rate, s.limits_rate_seconds
    lo, hi = rate * (1 - RATE_TOLERANCE), rate * (1 + RATE_TOLERANCE)
    return [
        Metric("17 limits", f"{n:,} no-ops under Limit.concurrency('bench', 10_000), 2 idle workers x {t} threads "
               "(first claim to last finish)",
               "procedures/s", limit_rate),
        Metric("17 limits", f"{n:,} no-ops without a limit, same workers", "procedures/s", none_rate),
        Metric("17 limits", "with / without a non-binding limit (paired runs)", "%", ratio, "≥ 85",
               lambda v: v >= 85),
        Metric("17 limits", "CPU per procedure (workers + PostgreSQL, whole worker life), with a non-binding limit",
               "ms", cpu_limit, digits=2),
        Metric("17 limits", "CPU per procedure (workers + PostgreSQL), without", "ms", cpu_none, digits=2),
        Metric("17 limits", f"{keys} keys limited to 1 each, {keys * s.limits_per_key:,} steps of {step * 1000:g} "
               f"ms, {shape}: most running at once (the steps' enter/exit times)", "procedures",
               [k["peak"] for k in keyed], f"≤ {keys}", lambda v: v <= keys),
        Metric("17 limits", "same, most running at once under one key", "procedures", [k["peak_key"] for k in keyed],
               "≤ 1", lambda v: v <= 1),
        Metric("17 limits", "same, throughput (first step start to last step end)", "procedures/s",
               [k["rate"] for k in keyed]),
        Metric("17 limits", f"same / the ideal {keys} / {step:g} s = {keys / step:,.0f}/s", "%",
               [k["ratio"] for k in keyed], "≥ 80", lambda v: v >= 80),
        Metric("17 limits", "same, CPU per procedure, workers (whole worker life)", "ms",
               [k["worker_ms"] for k in keyed], digits=2),
        Metric("17 limits", "same, CPU per procedure, PostgreSQL backends", "ms",
               [k["db_ms"] for k in keyed if k["db_ms"] == k["db_ms"]], digits=2),
        Metric("17 limits", f"Limit.rate({rate}, 1 s), a backlog for {secs} s, {s.limits_rate_workers} workers x "
               f"{t} threads: claims per 1 s window after the first (leases' claimed_at), mean", "claims/s",
               [r["mean"] for r in rated], f"{lo:g}-{hi:g}", lambda v: lo <= v <= hi, digits=1),
        Metric("17 limits", "same, fewest claims in a window", "claims/s", [r["min"] for r in rated],
               f"≥ {lo:g}", lambda v: v >= lo),
        Metric("17 limits", "same, most claims in a window", "claims/s", [r["max"] for r in rated],
               f"≤ {hi:g}", lambda v: v <= hi),
        Metric("17 limits", f"same, windows within ± {RATE_TOLERANCE:.0%}", "%", [r["within"] for r in rated],
               "100", lambda v: v >= 100),
        Metric("17 limits", "same, CPU per procedure, workers (whole worker life)", "ms",
               [r["worker_ms"] for r in rated], digits=2),
        Metric("17 limits", "same, CPU per procedure, PostgreSQL backends", "ms",
               [r["db_ms"] for r in rated if r["db_ms"] == r["db_ms"]], digits=2),
    ]

