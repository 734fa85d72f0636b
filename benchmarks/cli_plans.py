"""Query plans of ``manage.py procedures`` against the admin plans' table (1,000,000 procedures by default).

Run from the repository root::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/procedures_cli_plans \\
        .venv/bin/python -m benchmarks.cli_plans [--rows N] [--keep | --reuse]

Seeds as ``benchmarks.admin_plans`` does (its database is dropped and created
unless ``--reuse``), runs each read of the CLI (and the dry runs of its bulk
actions) with ``call_command``, re-runs every SELECT it issued under
``EXPLAIN (ANALYZE, BUFFERS)`` and names the indexes used, any sequential scan
and the rows examined.
"""

from __future__ import annotations

import argparse
import os
import sys
from io import StringIO

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

from benchmarks.admin_plans import capture, report
from benchmarks.admin_seed import count_finished, seed
from benchmarks.explain import database_settings, drop_database, recreate_database


def commands() -> list[list[str]]:
    """The command lines measured, for the rows :func:`seed` made."""
    from django_procedures.models import ProcedureRun

    child = ProcedureRun.objects.filter(depth=1).order_by("-created_at").values_list("id", flat=True).first()
    failed = (ProcedureRun.objects.filter(status="failed").order_by("-created_at")
              .values_list("id", flat=True).first())
    page = list(ProcedureRun.objects.order_by("-created_at", "-id").values_list("id", flat=True)[:50])[-1]
    return [
        ["list"], ["list", "--before", str(page)], ["list", "--status", "failed"], ["list", "--status", "waiting"],
        ["list", "--type", "billing.RefundPayment"], ["list", "--queue", "exports"],
        ["list", "--status", "failed", "--type", "billing.ChargeInvoice"], ["list", "--since", "1h"],
        ["list", "--status", "done", "--older-than", "30d"], ["list", "--error", "card was declined"],
        ["show", str(child)], ["show", str(failed)],
        ["retry", "--failed", "--dry-run", "--limit", "100"],
        ["retry", "--failed", "--type", "billing.ChargeInvoice", "--dry-run", "--limit", "100"],
        ["retry", str(failed), "--dry-run"],
        ["cancel", "--status", "ready", "--dry-run", "--limit", "20"],
        ["workers"], ["stats"], ["schedules", "list"],
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="procedures to seed (default 1,000,000)")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--reuse", action="store_true", help="use the database as it is (seeded with --keep)")
    parser.add_argument("--verbose", action="store_true", help="print every plan, not only the costly ones")
    args = parser.parse_args(argv)
    db = database_settings()
    if not args.reuse:
        recreate_database(db)
    try:
        import django
        from django.core.management import call_command
        from django.core.management.base import CommandError

        django.setup()
        call_command("migrate", interactive=False, verbosity=0)
        if not args.reuse:
            seed(args.rows)
        else:
            count_finished()
        summary = []
        for line in commands():

            def run(line: list[str] = line) -> None:
                try:
                    call_command("procedures", *line, stdout=StringIO(), stderr=StringIO())
                except CommandError as error:  # a refusal (a filter matching nothing) still made its reads
                    print(f"   ({error})")

            summary += report("procedures " + " ".join(line), capture(run), args.verbose)
        print(f"\n{'=' * 100}\nsummary\n{'=' * 100}")
        print("\n".join(summary))
        return 0
    finally:
        if not (args.keep or args.reuse):
            drop_database(db)


if __name__ == "__main__":
    sys.exit(main())
