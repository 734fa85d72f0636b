"""Settings of the example project used by the demo and the test suite.

The database comes from ``DATABASE_URL``: ``postgres://user@host:port/name``, or
``sqlite:///relative/path`` (relative to the project root) / ``sqlite:////absolute/path``;
without it, ``var/demo.sqlite3``. ``PROCEDURES_TEST_DB_NAME`` names the PostgreSQL test
database (default ``test_<name>``), so two test runs on one server need not collide.
"""

import json
import os
from importlib.util import find_spec
from pathlib import Path
from urllib.parse import unquote, urlparse

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "django-procedures-testproject-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["*"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    "django_procedures",
    "django_procedures.contrib.celery",
    "testproject.demo",
    "testproject.testapp",
]
if not find_spec("django.tasks"):  # Django 5.2: Django's Tasks framework is the django-tasks backport
    INSTALLED_APPS.insert(INSTALLED_APPS.index("django_procedures"), "django_tasks")

# Django's Tasks framework on the procedures workers. TASKS_OPTIONS_JSON lets a test configure worker subprocesses.
TASKS = {"default": {
    "BACKEND": "django_procedures.tasks.ProceduresBackend",
    "QUEUES": ["default", "emails"],
    "OPTIONS": json.loads(os.environ.get("TASKS_OPTIONS_JSON") or "{}"),
}}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "testproject.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
STATIC_URL = "static/"


def database_from_url(url: str) -> dict:
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        # sqlite:///var/demo.sqlite3 is relative to the project root; sqlite:////abs/path is absolute.
        path = unquote(parsed.netloc + parsed.path).removeprefix("/")
        if path == ":memory:":
            return sqlite_database(path)
        return sqlite_database(str(BASE_DIR / (path or "var/demo.sqlite3")))
    if parsed.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL must start with postgres:// or sqlite://; got {url!r}")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")) or "procedures",
        "USER": unquote(parsed.username or "postgres"),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "127.0.0.1",
        "PORT": str(parsed.port or 5432),
        "TEST": {"NAME": os.environ.get("PROCEDURES_TEST_DB_NAME") or None},
    }


def sqlite_database(path: str) -> dict:
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)  # var/ is not in the repository
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": path,
        # WAL, immediate transactions and a busy timeout: what a worker beside a web process needs.
        # SQLITE_TIMEOUT: a test's shorter busy timeout, to show a worker does not depend on it.
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": float(os.environ.get("SQLITE_TIMEOUT", 20)),
                    "init_command": "PRAGMA journal_mode=WAL;"},
    }


DATABASES = {"default": database_from_url(os.environ.get("DATABASE_URL", "sqlite:///var/demo.sqlite3"))}
# OTHER_DATABASE_URL adds a second alias, "other", for tests whose steps use another database (worker
# subprocesses only: the test run itself never sets it, so pytest creates no test database for it).
if os.environ.get("OTHER_DATABASE_URL"):
    DATABASES["other"] = database_from_url(os.environ["OTHER_DATABASE_URL"])
# LISTEN_DATABASE_URL adds "listen", a direct connection for LISTEN beside a DATABASE_URL through PgBouncer in
# transaction mode (worker subprocesses of make test-pgbouncer, with PROCEDURES["LISTEN_DATABASE"] = "listen").
if os.environ.get("LISTEN_DATABASE_URL"):
    DATABASES["listen"] = database_from_url(os.environ["LISTEN_DATABASE_URL"])

# PROCEDURES_JSON (a JSON object) lets tests configure worker subprocesses, e.g. {"SWEEP_SECONDS": 0.5}.
PROCEDURES = json.loads(os.environ.get("PROCEDURES_JSON") or "{}")

# Celery (testproject/celery.py reads the CELERY_* settings). CELERY_TASK_DEFAULT_QUEUE lets a test run use
# a queue of its own on a shared Redis database.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/7")
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_TASK_DEFAULT_QUEUE", "celery")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"django_procedures": {"handlers": ["console"], "level": os.environ.get("PROCEDURES_LOG", "INFO")}},
}
