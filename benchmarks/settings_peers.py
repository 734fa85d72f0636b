"""Settings of our workers in the side-by-side comparison with the peers: a project as small as theirs.

The peers' project (``../shared/peers/project/benchproj/settings.py``) installs ``contenttypes`` and
the queue's own app, with no admin, no auth, no URLs and DEBUG off. Ours installs ``contenttypes``,
``django_procedures`` and the benchmark procedures, and nothing else: a worker's start-up (Django
importing every installed app, the admin autodiscovering, the system checks loading the URLs) weighs
on a drain that lasts two seconds, so both sides start the same kind of project. The other
benchmarks keep ``benchmarks.settings`` (the test project's apps, as a real site has them).
"""

from testproject.settings import (  # noqa: F401  (settings are read from this module's names)
    DATABASES,
    DEFAULT_AUTO_FIELD,
    LOGGING,
    PROCEDURES,
    SECRET_KEY,
    TIME_ZONE,
    USE_TZ,
)

DEBUG = False
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["django.contrib.contenttypes", "django_procedures", "benchmarks"]
