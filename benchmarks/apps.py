import os

from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    """The benchmark suite's procedures; installed only by ``benchmarks.settings``."""

    name = "benchmarks"
    label = "benchmarks"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        # benchmarks.tree_profile counts the statements each worker sends (pg_stat_statements needs a restart).
        if os.environ.get("BENCH_STATEMENT_LOG"):
            from benchmarks.statements import install

            install(os.environ["BENCH_STATEMENT_LOG"])
