"""Query plans of the admin's pages against a table of 1,000,000 procedures.

Run from the repository root::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/procedures_admin_plans \\
        .venv/bin/python -m benchmarks.admin_plans

The script drops and creates the database named by ``DATABASE_URL``, migrates
it, seeds 40 schedules, ``ProcedureRun`` rows (roots and children, finished
over 400 days, some unfinished now, 50,000 runs of those schedules) and one
``Lease`` per started procedure with ``INSERT ... SELECT generate_series``,
runs ``VACUUM ANALYZE``, then requests each admin page with Django's test
client as a superuser. Every SELECT the page issued on
the app's tables is captured and re-run under ``EXPLAIN (ANALYZE, BUFFERS)``;
the report names the indexes used, any sequential scan, the rows examined and
the time. The database is dropped at the end unless ``--keep`` is given.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

from benchmarks.admin_seed import count_finished, seed
from benchmarks.explain import database_settings, drop_database, recreate_database, summarize


def capture(fn: Callable[[], Any]) -> list[tuple[str, Any]]:
    """The SELECT statements ``fn`` issues on the app's tables, with their parameters."""
    from django.db import connection

    seen: list[tuple[str, Any]] = []

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        if head in ("SELECT", "WITH") and "django_procedures_" in sql and not many:
            seen.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        fn()
    return seen


def explain(sql: str, params: Any) -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        return [row[0] for row in cursor.fetchall()]


def kind(sql: str) -> str:
    """A short name for what an admin statement is for."""
    upper = " ".join(sql.upper().split())
    if "WITH RECURSIVE" in upper:
        return "filter values"
    if "GROUP BY" in upper:
        return "aggregate"
    if "COUNT(" in upper and "LIMIT" in upper:
        return "capped count"
    if "MIN(" in upper and "MAX(" in upper:
        return "date bounds"
    if "EXISTS" in upper or upper.startswith("SELECT 1 AS"):
        return "probe"
    if "LIMIT" in upper:
        return "rows"
    return "select"


def report(title: str, statements: list[tuple[str, Any]], verbose: bool) -> list[str]:
    from django.db import connection

    print(f"\n{'=' * 100}\n{title}\n{'=' * 100}")
    lines = []
    for sql, params in statements:
        explain(sql, params)  # warm
        plan = explain(sql, params)
        summary = summarize(plan)
        heap = [s for s in summary.scans if s.reads_heap]
        seq = [s for s in heap if "Seq Scan" in s.kind]
        examined = sum(s.examined for s in heap)
        indexes = sorted({s.index for s in summary.scans if s.index})
        one_line = " ".join(connection.ops.compose_sql(sql, params).split())
        print(f"\n-- {one_line[:400]}{' …' if len(one_line) > 400 else ''}")
        if verbose or seq or examined > 20_000:
            print("\n".join("   " + line for line in plan))
        verdict = "SEQ SCAN" if seq else ("ok" if examined <= 20_000 else "many rows")
        line = (f"{kind(sql):<13} {summary.execution_ms or 0:>9.2f} ms {examined:>10,.0f} rows  {verdict:<9} "
                f"{', '.join(indexes) or '-'}")
        print(f"   => {line}")
        lines.append(f"{title.split(':')[0][:44]:<44} {line}")
    return lines


def admin_pages() -> list[tuple[str, str]]:
    """(title, URL) of the admin pages measured, for the rows :func:`seed` made."""
    from django_procedures.models import ProcedureRun, Schedule

    base = "/admin/django_procedures/procedurerun/"
    # A done child: the unfinished children (of the waiting parents) are in trees of 5.
    child, root = (ProcedureRun.objects.filter(depth=1, status="done").order_by("-created_at")
                   .values_list("id", "root_id").first())
    some_id = list(ProcedureRun.objects.order_by("created_at").values_list("id", flat=True)[:501])[-1]
    key = ProcedureRun.objects.filter(key__isnull=False).values_list("key", flat=True).first()
    schedule = Schedule.objects.order_by("id").values_list("id", flat=True)[1]
    year = ProcedureRun.objects.order_by("-created_at").values_list("created_at", flat=True).first().year
    # Page 100 of 50 rows needs 5,000 rows; a small table (the history benchmark's baseline) gets page 2.
    deep = 100 if ProcedureRun.objects.order_by("-created_at", "-id")[5_000:5_001].exists() else 2
    pages = [
        ("list, unfiltered (newest first)", base),
        ("list, page 100 (or the last, in a small table)", f"{base}?p={deep}"),
        ("list, status=failed", f"{base}?status__exact=failed"),
        ("list, status=waiting (rare)", f"{base}?status__exact=waiting"),
        ("list, type=billing.RefundPayment", f"{base}?type_name=billing.RefundPayment"),
        ("list, queue=exports", f"{base}?queue=exports"),
        ("list, retryable failures", f"{base}?retryable=yes"),
        ("list, roots only", f"{base}?roots=yes"),
        ("list, status=failed and type=billing.ChargeInvoice",
         f"{base}?status__exact=failed&type_name=billing.ChargeInvoice"),
        ("list, date drill-down to a month", f"{base}?created_at__year={year}&created_at__month=1"),
        ("search, an id", f"{base}?q={some_id}"),
        ("search, an idempotency key", f"{base}?q={key}"),
        ("search, common error words", f"{base}?q=card+was+declined"),
        ("search, words found nowhere", f"{base}?q=zebra+crossing"),
        ("procedure page, a child in a tree of 11", f"{base}{child}/change/"),
        ("procedure page, the root of a tree of 11 (its timeline)", f"{base}{root}/change/"),
        ("list, one schedule's runs (newest first)", f"{base}?schedule__id__exact={schedule}"),
        ("list, one schedule's failed runs", f"{base}?schedule__id__exact={schedule}&status__exact=failed"),
        ("list, not started by a schedule", f"{base}?schedule__isnull=True"),
        ("dashboard (with its charts: finished per minute and per 15 minutes, percentiles, queue depth)",
         f"{base}dashboard/"),
        ("schedules list", "/admin/django_procedures/schedule/"),
        ("schedule page (with its recent runs)", f"/admin/django_procedures/schedule/{schedule}/change/"),
        ("workers list", "/admin/django_procedures/worker/"),
        ("Prometheus gauges (django_procedures.contrib.prometheus)", "/procedures/metrics"),
    ]
    return pages


def time_pages(client: Any, pages: list[tuple[str, str]], repeat: int) -> dict[str, float]:
    """Median milliseconds of ``repeat`` GETs of each page (after one untimed GET), by title."""
    from statistics import median

    times = {}
    for title, url in pages:
        response = client.get(url)
        if response.status_code != 200:
            raise RuntimeError(f"GET {url} answered {response.status_code}")
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            client.get(url)
            samples.append((time.perf_counter() - started) * 1000)
        times[title] = median(samples)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="procedures to seed (default 1,000,000)")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--reuse", action="store_true", help="use the database as it is (seeded with --keep)")
    parser.add_argument("--verbose", action="store_true", help="print every plan, not only the costly ones")
    parser.add_argument("--time", type=int, default=0, metavar="N",
                        help="also time each page: the median of N requests, in milliseconds")
    args = parser.parse_args(argv)
    db = database_settings()
    if not args.reuse:
        print(f"database {db['NAME']} on {db['HOST']}:{db['PORT']}: drop if exists, create")
        recreate_database(db)
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", interactive=False, verbosity=0)
        from django.contrib.auth.models import User
        from django.test import Client

        from django_procedures.models import ProcedureRun

        if not args.reuse:
            print("seeding:")
            seed(args.rows)
        else:
            count_finished()
        user, _ = User.objects.get_or_create(username="plans", defaults={"is_staff": True, "is_superuser": True})
        client = Client()
        client.force_login(user)
        pages = admin_pages()
        summary = []
        for title, url in pages:
            statements = capture(lambda url=url: client.get(url))
            summary += report(f"{title}: GET {url}", statements, args.verbose)
        print(f"\n{'=' * 100}\nsummary ({ProcedureRun.objects.count():,} procedures)\n{'=' * 100}")
        print("\n".join(summary))
        if args.time:
            print(f"\nmedian of {args.time} requests per page:")
            for title, ms in time_pages(client, pages, args.time).items():
                print(f"  {ms:>8.1f} ms  {title}")
        return 0
    finally:
        if args.keep or args.reuse:
            print(f"\nkept database {db['NAME']}")
        else:
            drop_database(db)
            print(f"\ndropped database {db['NAME']}")


if __name__ == "__main__":
    sys.exit(main())
