"""Settings of the benchmark runner and of the worker processes it starts.

The test project's settings plus the ``benchmarks`` app, whose ``procedures``
module holds the no-op procedures the benchmarks run. The test suite never
loads this module, so these types exist only in benchmark workers.
"""

from testproject.settings import *  # noqa: F403
from testproject.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "benchmarks"]

# Workers in production run without DEBUG (which records every query on every connection).
DEBUG = False
