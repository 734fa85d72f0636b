"""Our workers beside the peers', interleaved, on one PostgreSQL: ``python -m benchmarks.run --peers``.

Each repetition runs the same work through us and through each peer of
:data:`COMPARISONS` (the order reverses every other
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

from benchmarks.common import Context, run_burst, submit
from benchmarks.harness import median
from benchmarks.peers import run_peer


@dataclass(frozen=True)
class Comparison:
    """One line of the comparison: a peer's scenario against the same work done by our workers."""

    peer: str
    scenario: str
    label: str
    #: "noop": N one-step no-op jobs; "steps10": N/10 jobs of ten no-op steps (rates are steps/s).
    work: str
    #: Seconds one repetition of the peer's scenario takes on the 2-core reference machine at N = 5,000
    #: (template, enqueue, drain, teardown): the expected duration printed before a run.
    seconds_at_5000: float


COMPARISONS = (
    Comparison("procrastinate", "thr-W2-c4", "Procrastinate 3.10, 2 workers x concurrency 4", "noop", 30.0),
    Comparison("dbos", "thr-W2-p1ms", "DBOS Transact 3.4, 2 workers, polling every 1 ms", "noop", 45.0),
    Comparison("dbos", "steps10-W2-p1ms", "DBOS Transact 3.4, 10-step workflows, 2 workers, 1 ms polling",
               "steps10", 25.0),
    # Celery on a Redis broker (database 5), acks_late, prefetch 1, no result backend: not durable in
    # PostgreSQL, the peer a Django team weighs us against (issue 31).
    Comparison("celery", "thr-W2-c4", "Celery 5.7 on Redis, 2 workers x 4 threads", "noop", 20.0),
    Comparison("celery", "thr-W2-prefork4", "Celery 5.7 on Redis, 2 workers x prefork 4", "noop", 25.0),
    Comparison("celery", "steps10-W2-c4", "Celery 5.7 on Redis, chains of 10, 2 workers x 4 threads",
               "steps10", 25.0),
)
#: The packages whose versions are shown for each peer (the harness records every one it installed).
PACKAGES = {"procrastinate": ("procrastinate", "Django", "psycopg"), "dbos": ("dbos", "SQLAlchemy", "psycopg"),
            "dtdb": ("django-tasks-db", "Django", "psycopg"), "celery": ("celery", "kombu", "redis")}
#: Seconds one repetition of our side takes at N = 5,000 (two drains, fresh databases).
OURS_SECONDS_AT_5000 = 25.0


def rate(result: dict[str, Any], work: str, active: bool) -> float | None:
    """Jobs/s (or steps/s for ten-step work) of one peer result: from its first start (active) or wall."""
    key = ("steps_per_s_" if work == "steps10" else "jobs_per_s_") + ("active" if active else "wall")
    value = result.get(key)
    return float(value) if value else None


def expected_seconds(n: int, reps: int) -> float:
    """What a comparison of ``reps`` repetitions at ``n`` jobs should take on the reference machine.

    About a third of each figure at N = 5,000 is fixed (templates, migrations, start-up); the rest
    grows with ``n``.
    """
    per_rep = OURS_SECONDS_AT_5000 + sum(c.seconds_at_5000 for c in COMPARISONS)
    return per_rep * (0.3 + 0.7 * n / 5000) * reps


#: Worker processes on both sides (the peers' scenarios are all W = 2).
WORKERS = 2
#: Our workers start a project as small as the peers' (benchmarks/settings_peers.py).
PROJECT = {"DJANGO_SETTINGS_MODULE": "benchmarks.settings_peers"}


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
        from django_procedures.models import ProcedureRun

        # As the peer driver does before its workers start: ANALYZE of the job table, the one that holds the jobs.
        # Not the whole database: an ANALYZE of the empty lease table records it as empty, and a worker
        # connection's prepared completion statement then keeps a generic plan that reads the lease table whole,
        # as it grows by a row a claim (see benchmarks.waits.seed_sleepers_and_analyze).
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {connection.ops.quote_name(ProcedureRun._meta.db_table)}")
            cursor.execute("CHECKPOINT")
        run = run_burst(ctx, db, since, count, WORKERS, env=PROJECT)
        units = count * steps
        return Ours(units / (run.last - run.t0), units / (run.last - run.first), run.commits / units,
                    max(w.last.hwm_kb for w in run.started) / 1024)


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
            began = time.monotonic()
            found = run_peer(side, scenarios, n, 1, host=ctx.server.host, user=ctx.server.user)
            versions = {k: v for k, v in found.get("meta", {}).get("peer_versions", {}).items()
                        if v and k in PACKAGES.get(side, ())}
            for scenario, results in found["scenarios"].items():
                pairs[(side, scenario)].theirs += [{**r, "versions": versions} for r in results]
            ctx.progress(f"  {side} rep {rep}: {', '.join(scenarios)} in {time.monotonic() - began:.0f}s")
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
    notes = [f"\nOurs: `procedures_worker --burst`, {WORKERS} processes x {threads} threads, in a project as small "
             "as the peers' (contenttypes, django_procedures and the benchmark procedures: "
             "benchmarks/settings_peers.py)."]
    if noop:
        notes.append(f"Ours, one-step jobs: {_fmt([o.commits for o in noop.ours], 3)} commits per procedure "
                     f"(target ≤ 1.1), worker peak RSS {_fmt([o.rss_mb for o in noop.ours])} MB (target ≤ 120).")
    if steps:
        notes.append(f"Ours, ten-step jobs: {_fmt([o.commits for o in steps.ours], 3)} commits per step.")
    for p in pairs:
        if p.theirs:
            first = p.theirs[0]
            notes.append(f"{p.comparison.peer} `{p.comparison.scenario}`: {_per_job(first)}; versions "
                         + ", ".join(f"{k} {v}" for k, v in first.get("versions", {}).items() if v) + ".")
    return "\n".join(lines) + "\n" + "\n".join(notes)


def _per_job(result: dict[str, Any]) -> str:
    """What one job of a peer costs its store: PostgreSQL commits, or (Celery) Redis commands per task."""
    calls = result.get("redis_calls_per_task")
    if calls and not result.get("per_job_db"):
        return f"{sum(calls.values()):.1f} Redis commands per task (no PostgreSQL)"
    return f"{result.get('per_job_db', {}).get('xact_commit', '?')} commits per job"


def raw(pairs: list[Pairs]) -> str:
    rows = []
    for p in pairs:
        c = p.comparison
        for i, (o, t) in enumerate(zip(p.ours, p.theirs, strict=False), start=1):
            rows.append(f"- rep {i}, {c.peer} {c.scenario}: ours {o.active:,.1f} active / {o.wall:,.1f} wall; "
                        f"theirs {rate(t, c.work, True) or 0:,.1f} active / {rate(t, c.work, False) or 0:,.1f} wall"
                        f"{'' if t.get('verified', True) else ' (NOT verified by the driver)'}")
    return "\n".join(rows)
