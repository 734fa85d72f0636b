"""Four tickers at once over 200 due schedules (PostgreSQL): the database pass under contention.

Each round, four threads, each on its own connection, call ``tick(now)`` at the same instant (a
barrier), while a sampler counts the runs holding a slot of every schedule; in some rounds a fifth
thread runs runs to their end at the same time, so runs reach their final status (freeing slots,
starting pending ticks, setting fixed_delay ticks) while the tickers lock schedules. Between rounds the main
thread drains some of the runs, so that other rounds find their slots busy (skips, pending ticks,
overlaps). After every round, with nothing running, the books must balance:

- no (schedule, tick_at) pair has two runs, and every schedule was ticked once per round;
- no schedule ever had more runs holding a slot than ``max_concurrency``, and ``active_runs`` is
  the number of its runs not yet final;
- every tick a rate schedule has handled (those before its ``next_tick_at``) is a run, a pending
  tick or a skip; a fixed_delay schedule has one run per handled tick and no skips;
- what the tickers reported (schedules, started, skipped) is what the database holds.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.models import Count

from django_procedures import clock, register_schedule, tick
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.policy.status import FINAL
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store.claim import claim
from django_procedures.store.ticks import TickReport
from django_procedures.testing import drain
from testproject.testapp.procedures import Heartbeat

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

T0 = datetime(2031, 3, 1, 8, 0, tzinfo=UTC)
PERIOD = timedelta(minutes=1)
#: Schedules each of the four tickers locks per transaction: small batches make them interleave.
BATCHES = [3, 4, 5, 7]
TICKERS = len(BATCHES)
SCHEDULES = 200
KINDS = [
    {"mode": "fixed_rate", "missed": "skip"},
    {"mode": "fixed_rate", "missed": "coalesce_latest"},
    {"mode": "fixed_rate", "missed": "catch_up", "max_pending": 2},
    {"mode": "fixed_rate_overlap", "max_concurrency": 3, "missed": "catch_up", "max_pending": 2},
    {"mode": "fixed_rate_overlap", "max_concurrency": 2, "missed": "skip"},
    {"mode": "fixed_rate_overlap", "max_concurrency": 2, "missed": "coalesce_latest"},
    {"mode": "fixed_delay"},
]
#: round -> (runs finish on a fifth thread during the tick, the main thread drains after it)
ROUNDS = [(False, False), (False, True), (True, False), (False, False), (True, False), (False, False)]


def slots_held() -> dict[int, int]:
    rows = (ProcedureRun.objects.filter(schedule__isnull=False).exclude(status__in=FINAL)
            .values("schedule_id").annotate(n=Count("id")).values_list("schedule_id", "n"))
    return dict(rows)


class Threads:
    """Start functions on threads at one barrier; each thread closes its own connection; errors re-raised."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []

    def start(self, barrier: threading.Barrier | None, fn) -> None:
        def body():
            try:
                if barrier is not None:
                    barrier.wait(30)
                fn()
            except BaseException as error:  # re-raised in join()
                self.errors.append(error)
            finally:
                connection.close()

        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(120)
            assert not thread.is_alive(), "a thread did not finish within 120 s"
        if self.errors:
            raise self.errors[0]


def finish_runs(stop: threading.Event, now: datetime) -> None:
    """Run due runs to their end, one claim at a time, until ``stop`` (like ``drain``, but bounded)."""
    with clock.frozen_at(now):
        while not stop.is_set():
            batch = claim("finisher", type_names=[Heartbeat.type_name], limit=1, lease_seconds=30)
            if batch:
                execute(RunningClaim(batch[0]))
            else:
                stop.wait(0.01)


def run_round(now: datetime, finish_during: bool) -> tuple[list[TickReport], Counter[int]]:
    """Four tickers at one barrier (and maybe a finisher); returns their reports and the peak slots held."""
    barrier = threading.Barrier(TICKERS)
    reports: list[TickReport] = []
    peak: Counter[int] = Counter()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for schedule_id, n in slots_held().items():
                peak[schedule_id] = max(peak[schedule_id], n)

    tickers, helpers = Threads(), Threads()
    for batch in BATCHES:
        tickers.start(barrier, lambda batch=batch: reports.append(tick(now, batch_size=batch)))
    if finish_during:  # runs end while the tickers hold schedule rows (lock order: schedule first)
        helpers.start(None, lambda: finish_runs(stop, now + timedelta(seconds=20)))
    helpers.start(None, sample)
    tickers.join()
    stop.set()
    helpers.join()
    return reports, peak


def test_four_concurrent_tickers_never_start_a_tick_twice_nor_lose_one():
    with clock.frozen_at(T0):
        schedules = [register_schedule(f"s{i:03d}", Heartbeat, period=PERIOD, **KINDS[i % len(KINDS)])[0]
                     for i in range(SCHEDULES)]
    bound = {s.id: s.max_concurrency for s in schedules}
    reported: Counter[str] = Counter()
    started_by_round: list[int] = []

    for number, (finish_during, drain_after) in enumerate(ROUNDS):
        now = T0 + number * PERIOD + timedelta(seconds=1)
        due = Schedule.objects.filter(enabled=True, next_tick_at__lte=now).count()
        reports, peak = run_round(now, finish_during)

        assert [r.errors for r in reports if r.errors] == []
        handled = sum(r.schedules for r in reports)
        if finish_during:  # a schedule locked by a finishing run is left for the next pass
            assert handled <= due
        else:
            assert handled == due, f"round {number}: {due} schedules were due, the tickers handled {handled}"
            assert not Schedule.objects.filter(enabled=True, next_tick_at__lte=now).exists()
        assert all(peak[s] <= bound[s] for s in peak), "a schedule had more runs holding a slot than its bound"
        reported.update(started=sum(r.started for r in reports), skipped=sum(r.skipped for r in reports),
                        overlaps=sum(r.overlaps for r in reports))
        started_by_round.append(sum(r.started for r in reports))
        assert ProcedureRun.objects.filter(schedule__isnull=False, created_at=now).count() == started_by_round[-1]
        check_the_books(bound, number)
        if drain_after:
            drain(now=now + timedelta(seconds=30))
            check_the_books(bound, number)

    totals = {name: sum(getattr(s, name) for s in Schedule.objects.all()) for name in ("skips", "overlaps")}
    assert reported["skipped"] == totals["skips"] > 0, "every skip the tickers reported is on a schedule, once"
    assert totals["overlaps"] >= reported["overlaps"] > 0
    assert started_by_round[0] == SCHEDULES
    assert ProcedureRun.objects.filter(schedule__isnull=False).count() >= sum(started_by_round)


def check_the_books(bound: dict[int, int], number: int) -> None:
    duplicates = (ProcedureRun.objects.filter(schedule__isnull=False).values("schedule_id", "tick_at")
                  .annotate(n=Count("id")).filter(n__gt=1))
    assert not duplicates.exists(), f"round {number}: a tick started twice: {list(duplicates[:5])}"
    held = slots_held()
    runs = dict(ProcedureRun.objects.filter(schedule__isnull=False).values("schedule_id")
                .annotate(n=Count("id")).values_list("schedule_id", "n"))
    for s in Schedule.objects.all():
        where = f"round {number}, schedule {s.name} ({s.mode}/{s.missed})"
        assert s.active_runs == held.get(s.id, 0) <= bound[s.id], where
        if s.mode == "fixed_delay":
            assert (s.skips, s.pending_ticks) == (0, []), where
            assert (s.next_tick_at is None) == (s.active_runs == 1), where
            continue
        ticks_handled = (s.next_tick_at - T0) // PERIOD
        assert ticks_handled == runs.get(s.id, 0) + len(s.pending_ticks) + s.skips, where
