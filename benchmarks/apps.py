from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    """The benchmark suite's procedures; installed only by ``benchmarks.settings``."""

    name = "benchmarks"
    label = "benchmarks"
    verbose_name = "Benchmarks"
