from django.apps import AppConfig


class HardbyteConfig(AppConfig):
    """The adapter's procedure type; installed only by ``benchmarks.hardbyte.settings``."""

    name = "benchmarks.hardbyte"
    label = "hardbyte_bench"
    verbose_name = "hardbyte benchmark adapter"
