"""Settings of the adapter process and the workers it starts: the benchmark settings plus this app.

The database is the harness's ``DATABASE_URL`` (read by ``testproject.settings``).
"""

from benchmarks.settings import *  # noqa: F403
from benchmarks.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "benchmarks.hardbyte"]
