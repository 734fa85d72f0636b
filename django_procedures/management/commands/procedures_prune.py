"""``manage.py procedures_prune``: delete finished trees older than the retention age."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_procedures import clock
from django_procedures.conf import conf
from django_procedures.policy.durations import parse_duration
from django_procedures.policy.status import FINAL
from django_procedures.runtime.retention import BATCH_SECONDS, BATCH_TREES, MAX_BATCH_TREES, Pace
from django_procedures.store import retention, workers

#: Trees deleted in one transaction at most: a larger batch holds its locks and its WAL for too long.
MAX_BATCH_SIZE = MAX_BATCH_TREES
#: Seconds between progress lines (and one when the trees counted at the start are done).
PROGRESS_SECONDS = 1.0


class Command(BaseCommand):
    help = ("Delete whole finished procedure trees (with their steps and leases) older than a given age, and the "
            "rows of workers stopped or gone since before then.")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--older-than", default=None,
                            help="Age such as 7d, 12h or 1d12h (default: PROCEDURES['RETENTION']).")
        parser.add_argument("--status", default=None,
                            help=f"Comma-separated final statuses of the trees' roots (default: all of "
                                 f"{', '.join(sorted(FINAL))}).")
        parser.add_argument("--batch-size", type=int, default=None,
                            help=f"Trees deleted per transaction (1 to {MAX_BATCH_SIZE:,}; default: {BATCH_TREES} "
                                 f"at first, then as many as take about {BATCH_SECONDS * 1000:.0f} ms).")
        parser.add_argument("--dry-run", action="store_true", help="Count what would be deleted; delete nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        source = "--older-than" if options["older_than"] else "PROCEDURES['RETENTION']"
        if not options["older_than"] and conf.RETENTION is None:
            raise CommandError("PROCEDURES['RETENTION'] is None (workers keep every finished procedure); "
                               "give the age to prune with --older-than, e.g. --older-than 30d")
        try:
            age = parse_duration(options["older_than"] or conf.RETENTION)
        except ValueError as error:
            raise CommandError(f"{source}: {error}") from None
        now = clock.now()
        try:
            cutoff = now - age
        except OverflowError:
            raise CommandError(f"{source}: {age.days} days ago is before the year 1; give an age of at most "
                               f"{(now - datetime.min.replace(tzinfo=UTC)).days} days") from None
        statuses = None
        if options["status"] is not None:
            statuses = [s.strip() for s in options["status"].split(",") if s.strip()]
            if not statuses:
                raise CommandError(f"--status needs at least one final status ({', '.join(sorted(FINAL))}); "
                                   "leave it out to prune trees of every final status")
            unknown = sorted(set(statuses) - FINAL)
            if unknown:
                raise CommandError(f"--status accepts only final statuses ({', '.join(sorted(FINAL))}); "
                                   f"got {', '.join(unknown)}. Unfinished trees are never pruned.")
        if options["batch_size"] is not None and not 1 <= options["batch_size"] <= MAX_BATCH_SIZE:
            raise CommandError(f"--batch-size must be between 1 and {MAX_BATCH_SIZE:,} trees; "
                               f"got {options['batch_size']}")
        if options["dry_run"]:
            found = retention.count(cutoff, statuses)
            self.stdout.write(f"would delete {found.trees} trees finished before {cutoff:%Y-%m-%d %H:%M:%S %Z}: "
                              f"{found.procedures} procedures, {found.steps} steps, {found.leases} leases")
            self.stdout.write(f"would delete {workers.prune(cutoff, dry_run=True)} worker rows "
                              "(stopped or gone, last seen before then)")
            return
        total = retention.PruneBatch()
        expected = retention.count_trees(cutoff, statuses)
        self.stdout.write(f"{expected:,} trees finished before {cutoff:%Y-%m-%d %H:%M:%S %Z} to prune")
        pace = Pace() if options["batch_size"] is None else Pace(options["batch_size"], seconds=None)
        started = last_report = time.monotonic()
        while True:
            batch, _ = pace.prune_batch(cutoff, statuses)  # None only when alone=True
            if batch is None or not batch.trees:
                break
            total += batch
            now_ = time.monotonic()
            if now_ - last_report >= PROGRESS_SECONDS or total.trees >= expected:
                last_report = now_
                rate = total.procedures / max(now_ - started, 1e-6)
                self.stdout.write(f"deleted {total.trees:,} trees so far ({total.procedures:,} procedures, "
                                  f"{total.steps:,} steps, {total.leases:,} leases; {rate:,.0f} procedures/s); "
                                  f"about {max(expected - total.trees, 0):,} trees remaining")
        gone = workers.prune(cutoff)
        self.stdout.write(self.style.SUCCESS(
            f"pruned {total.trees} trees finished before {cutoff:%Y-%m-%d %H:%M:%S %Z}, and {gone} worker rows "
            "(stopped or gone, last seen before then)"))
