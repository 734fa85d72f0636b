"""``manage.py procedures_prune``: delete finished trees older than the retention age."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_procedures import clock
from django_procedures.conf import conf
from django_procedures.policy.durations import parse_duration
from django_procedures.policy.status import FINAL
from django_procedures.store import retention, workers


class Command(BaseCommand):
    help = ("Delete whole finished procedure trees (with their steps and leases) older than a given age, and the "
            "rows of workers stopped or gone since before then.")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--older-than", default=None,
                            help="Age such as 7d, 12h or 1d12h (default: PROCEDURES['RETENTION']).")
        parser.add_argument("--status", default=None,
                            help=f"Comma-separated final statuses of the trees' roots (default: all of "
                                 f"{', '.join(sorted(FINAL))}).")
        parser.add_argument("--batch-size", type=int, default=500, help="Trees deleted per transaction.")
        parser.add_argument("--dry-run", action="store_true", help="Count what would be deleted; delete nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            age = parse_duration(options["older_than"] or conf.RETENTION)
        except ValueError as error:
            raise CommandError(f"--older-than: {error}") from None
        statuses = None
        if options["status"]:
            statuses = [s.strip() for s in options["status"].split(",") if s.strip()]
            unknown = sorted(set(statuses) - FINAL)
            if unknown:
                raise CommandError(f"--status accepts only final statuses ({', '.join(sorted(FINAL))}); "
                                   f"got {', '.join(unknown)}. Unfinished trees are never pruned.")
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        cutoff = clock.now() - age
        if options["dry_run"]:
            found = retention.count(cutoff, statuses)
            self.stdout.write(f"would delete {found.trees} trees finished before {cutoff:%Y-%m-%d %H:%M:%S %Z}: "
                              f"{found.procedures} procedures, {found.steps} steps, {found.leases} leases")
            self.stdout.write(f"would delete {workers.prune(cutoff, dry_run=True)} worker rows "
                              "(stopped or gone, last seen before then)")
            return
        total = retention.PruneBatch(0, 0, 0, 0)
        while True:
            batch = retention.prune_batch(cutoff, statuses, options["batch_size"])
            if not batch.trees:
                break
            total = retention.PruneBatch(*(a + b for a, b in zip(
                (total.trees, total.procedures, total.steps, total.leases),
                (batch.trees, batch.procedures, batch.steps, batch.leases), strict=True)))
            self.stdout.write(f"deleted {total.trees} trees so far ({total.procedures} procedures, "
                              f"{total.steps} steps, {total.leases} leases)")
        gone = workers.prune(cutoff)
        self.stdout.write(self.style.SUCCESS(
            f"pruned {total.trees} trees finished before {cutoff:%Y-%m-%d %H:%M:%S %Z}, and {gone} worker rows "
            "(stopped or gone, last seen before then)"))
