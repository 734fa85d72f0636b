"""Our workers beside the peers', interleaved, on one PostgreSQL: ``python -m benchmarks.run --peers``.

Each repetition runs the same work through us and through each peer of
:data:`benchmarks.peers.COMPARISONS` (the order reverses every other
repetition, so a warming cache or a neighbour's burst does not favour one
side): N no-op one-step jobs drained by 2 worker processes, and N/10 ten-step
jobs (steps/s). Both sides enqueue first, then ``ANALYZE`` and
``CHECKPOINT``, then start their workers and time the drain. Rates are given
two ways: from the workers' start (start-up included: "wall") and from the
first job started to the last finished ("active"). Each repetition gives a
paired ratio ours / theirs; the table shows medians over the repetitions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks.harness import BenchmarkError, close_connection, finished_span, median
from benchmarks.peers import COMPARISONS, Comparison, expected_seconds, rate, run_peer
from benchmarks.suite import Context, submit

#: Worker processes on both sides (the peers' scenarios are all W = 2).
WORKERS = 2


@dataclass
class Ours:
    wall: float  # per second from the workers' start to the last finish (jobs, or steps for ten-step work)
    active: float  # same, from the first start
    commits: float  # commits per job (or per step) over the workers' whole life
    rss_mb: float  # largest worker peak RSS


@dataclass
class Pairs:
    """Per repetition: our figures and the peer's, for one comparison."""

    comparison: Comparison
    ours: list[Ours] = field(default_factory=list)
    theirs: list[dict[str, Any]] = field(default_factory=list)


def drain(ctx: Context, label: str, work: str, n: int) -> Ours:
    """Our side of one comparison: ``n`` no-op jobs (or ``n // 10`` ten-step ones) drained by 2 burst workers."""
    from benchmarks.procedures import Noop, TenSteps

    cls, count, steps = (TenSteps, n // 10, 10) if work == "steps10" else (Noop, n, 1)
    with ctx.databases.fresh(label) as db:
        from django.db import connection
        from django.utils import timezone

        since = timezone.now()
        submit(cls, [{}] * count)
        with connection.cursor() as cursor:  # as the peer driver does before its workers start
            cursor.execute("ANALYZE")
            cursor.execute("CHECKPOINT")
        close_connection()
        ctx.server.wait_disconnected(db)
        before = ctx.server.xact_commit(db)
        with ctx.workers(db) as pool:
            started = pool.start(WORKERS, concurrency=ctx.threads, burst=True)
            pool.wait_exit(started, ctx.sizes.timeout)
        ctx.server.wait_disconnected(db)
        commits = ctx.server.xact_commit(db) - before
        found, first, last = finished_span(since)
        if found != count:
            raise BenchmarkError(f"expected {count} procedures, found {found}")
        t0 = min(w.started for w in started)
        units = count * steps
        return Ours(units / (last - t0), units / (last - first), commits / units,
                    max(w.last.hwm_kb for w in started) / 1024)


def compare(ctx: Context, n: int) -> list[Pairs]:
    """Interleaved repetitions of our drains and the peers' scenarios; figures per repetition."""
    pairs = {(c.peer, c.scenario): Pairs(c) for c in COMPARISONS}
    peers = list(dict.fromkeys(c.peer for c in COMPARISONS))
    ctx.progress(f"  expected duration: about {expected_seconds(n, ctx.runs) / 60:.0f} min on an idle 2-core "
                 f"machine ({ctx.runs} repetition(s) at N = {n:,}), longer under load; each driver call is "
                 "stopped after 15 min")
    begun = time.monotonic()
    for rep in range(1, ctx.runs + 1):
        order: list[str] = ["ours", *peers]
        if rep % 2 == 0:
            order.reverse()
        for side in order:
            if side == "ours":
                for work in dict.fromkeys(c.work for c in COMPARISONS):
                    mine = drain(ctx, f"peers_ours_{work}_{rep}", work, n)
                    ctx.progress(f"  ours rep {rep}, {work}: {mine.active:,.0f}/s active, {mine.wall:,.0f}/s wall, "
                                 f"{mine.commits:.3f} commits per {'step' if work == 'steps10' else 'job'}, "
                                 f"peak RSS {mine.rss_mb:.0f} MB")
                    for p in pairs.values():
                        if p.comparison.work == work:
                            p.ours.append(mine)
                continue
            scenarios = [c.scenario for c in COMPARISONS if c.peer == side]
            found = run_peer(side, scenarios, n, 1, first_rep=rep, server=ctx.server, progress=ctx.progress)
            for scenario, results in found.items():
                pairs[(side, scenario)].theirs += results
        if rep == 1 and ctx.runs > 1:
            spent = time.monotonic() - begun
            ctx.progress(f"  repetition 1 took {spent / 60:.1f} min: about {spent * (ctx.runs - 1) / 60:.0f} min "
                         "to go")
    return list(pairs.values())


def _ratio(ours: list[float], theirs: list[float | None]) -> list[float]:
    return [a / b for a, b in zip(ours, theirs, strict=True) if b]


def _fmt(values: list[float], digits: int = 0) -> str:
    if not values:
        return "—"
    mid = median(values)
    spread = f" ({min(values):,.{digits}f}-{max(values):,.{digits}f})" if len(values) > 1 else ""
    return f"{mid:,.{digits}f}{spread}"


def table(pairs: list[Pairs], n: int, threads: int) -> str:
    """Medians (and min-max) over the repetitions: ours, theirs, and the paired ratio, active and wall."""
    lines = [
        f"| Work (N = {n:,}) | Peer | Ours active /s | Theirs active /s | Paired ratio, active "
        "| Ours wall /s | Theirs wall /s | Paired ratio, wall | Runs |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in pairs:
        c = p.comparison
        work = "10-step jobs, steps/s" if c.work == "steps10" else "no-op one-step jobs, jobs/s"
        ours_a, ours_w = [o.active for o in p.ours], [o.wall for o in p.ours]
        theirs_a = [rate(r, c.work, True) for r in p.theirs]
        theirs_w = [rate(r, c.work, False) for r in p.theirs]
        lines.append(f"| {work} | {c.label} (`{c.scenario}`) | {_fmt(ours_a)} | "
                     f"{_fmt([t for t in theirs_a if t])} | **{_fmt(_ratio(ours_a, theirs_a), 2)}x** | "
                     f"{_fmt(ours_w)} | {_fmt([t for t in theirs_w if t])} | {_fmt(_ratio(ours_w, theirs_w), 2)}x | "
                     f"{len(p.theirs)} |")
    noop = next((p for p in pairs if p.comparison.work == "noop"), None)
    steps = next((p for p in pairs if p.comparison.work == "steps10"), None)
    notes = [f"\nOurs: `procedures_worker --burst`, {WORKERS} processes x {threads} threads."]
    if noop:
        notes.append(f"Ours, one-step jobs: {_fmt([o.commits for o in noop.ours], 3)} commits per procedure "
                     f"(target ≤ 1.1), worker peak RSS {_fmt([o.rss_mb for o in noop.ours])} MB (target ≤ 120).")
    if steps:
        notes.append(f"Ours, ten-step jobs: {_fmt([o.commits for o in steps.ours], 3)} commits per step.")
    for p in pairs:
        if p.theirs:
            first = p.theirs[0]
            db = first.get("per_job_db", {})
            notes.append(f"{p.comparison.peer} `{p.comparison.scenario}`: `{first.get('command', '')}`, "
                         f"{db.get('xact_commit', '?')} commits per job; versions "
                         + ", ".join(f"{k} {v}" for k, v in first.get("versions", {}).items() if v) + ".")
    return "\n".join(lines) + "\n" + "\n".join(notes)


def raw(pairs: list[Pairs]) -> str:
    rows = []
    for p in pairs:
        c = p.comparison
        for i, (o, t) in enumerate(zip(p.ours, p.theirs, strict=False), start=1):
            rows.append(f"- rep {i}, {c.peer} {c.scenario}: ours {o.active:,.1f} active / {o.wall:,.1f} wall; "
                        f"theirs {rate(t, c.work, True) or 0:,.1f} active / {rate(t, c.work, False) or 0:,.1f} wall"
                        f"{'' if t.get('verified', True) else ' (NOT verified by the driver)'}")
    return "\n".join(rows)
