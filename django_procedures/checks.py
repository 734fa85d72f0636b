"""System checks for the ``PROCEDURES`` settings and the database they run on."""

from __future__ import annotations

import difflib
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.db import DatabaseError, connections, transaction

from django_procedures.conf import DEFAULTS, conf
from django_procedures.policy.durations import parse_duration
from django_procedures.policy.options import check_queue
from django_procedures.policy.worker_config import settings_problems


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    errors: list[Any] = []
    raw = getattr(settings, "PROCEDURES", {})
    if not isinstance(raw, dict):
        return [Error("PROCEDURES must be a dict of settings", hint="See docs/settings.md.",
                      id="django_procedures.E001")]
    for key in raw:
        if key not in DEFAULTS:
            close = difflib.get_close_matches(key, DEFAULTS, n=1)
            hint = f"Did you mean {close[0]!r}?" if close else "See docs/settings.md for the known keys."
            errors.append(Error(f"PROCEDURES has an unknown key {key!r}", hint=hint, id="django_procedures.E002"))
    if errors:
        return errors

    # The worker's settings, by the rules procedures_worker applies to them with its options laid over them.
    sqlite = "sqlite" in _default_database().get("ENGINE", "")
    for problem in settings_problems(conf.merged(), sqlite=sqlite):
        errors.append(Error(problem.msg, hint=problem.hint, id=problem.id))
    if any(error.id == "django_procedures.E003" for error in errors):
        return errors
    for name in ("MAX_ERROR_LENGTH", "MAX_TRACEBACK_LENGTH"):
        if not isinstance(getattr(conf, name), int) or getattr(conf, name) < 100:
            errors.append(Error(f"PROCEDURES[{name!r}] must be an integer of at least 100",
                                id="django_procedures.E007"))
    max_state = conf.MAX_STATE_BYTES
    if isinstance(max_state, bool) or not isinstance(max_state, int) or max_state < 1024:
        errors.append(Error(f"PROCEDURES['MAX_STATE_BYTES'] must be an integer of at least 1024 (bytes); got "
                            f"{max_state!r}", hint="The default is 4194304 (4 MiB).", id="django_procedures.E020"))
    for name, default, check_id in (("MAX_EVENT_BYTES", "1048576 (1 MiB)", "E023"),
                                    ("MAX_UNCONSUMED_EVENTS", "1000", "E024")):
        value = getattr(conf, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            errors.append(Error(f"PROCEDURES[{name!r}] must be an integer of at least 1; got {value!r}",
                                hint=f"The default is {default}. See docs/waiting.md.",
                                id=f"django_procedures.{check_id}"))
    redact = conf.REDACT
    if isinstance(redact, str) or not isinstance(redact, list | tuple | set | frozenset) or not all(
            isinstance(key, str) for key in redact):
        errors.append(Error(f"PROCEDURES['REDACT'] must be a list of state keys (strings); got {redact!r}",
                            hint='For example ["password", "api_token"].', id="django_procedures.E010"))
    try:
        if conf.DEFAULT_QUEUE is None:
            raise TypeError("PROCEDURES['DEFAULT_QUEUE'] must be a queue name; got None")
        check_queue(conf.DEFAULT_QUEUE, "PROCEDURES['DEFAULT_QUEUE']")
    except (TypeError, ValueError) as error:
        errors.append(Error(str(error), hint='For example "default".', id="django_procedures.E012"))
    token = conf.METRICS_TOKEN
    if token is not None and (not isinstance(token, str) or not token.strip()):
        errors.append(Error("PROCEDURES['METRICS_TOKEN'] must be a non-empty string or None; got "
                            f"{type(token).__name__}",
                            hint="Read it from the environment, e.g. os.environ.get('PROCEDURES_METRICS_TOKEN').",
                            id="django_procedures.E013"))
    cap = conf.METRICS_COUNT_CAP
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        errors.append(Error(f"PROCEDURES['METRICS_COUNT_CAP'] must be a positive integer; got {cap!r}",
                            hint="The default is 100000.", id="django_procedures.E014"))
    errors.extend(_check_tracing(conf.TRACING))
    ticker = conf.TICKER
    if ticker is not None and (not isinstance(ticker, str) or not ticker.strip()):
        errors.append(Error(f"PROCEDURES['TICKER'] must be None or a non-empty string saying who ticks the "
                            f"schedules; got {ticker!r}",
                            hint='For example "a cron job calling django_procedures.tick() every minute", or None '
                                 "to have check W004 look for a procedures_worker --with-scheduler or Celery beat.",
                            id="django_procedures.E019"))
    try:
        if conf.RETENTION is not None:
            parse_duration(conf.RETENTION)
    except ValueError as error:
        errors.append(Error(f"PROCEDURES['RETENTION']: {error}", hint="Write a duration such as \"30d\", or None "
                            "to keep every finished procedure.", id="django_procedures.E009"))
    if sqlite:
        errors.extend(_check_sqlite())
    errors.extend(_check_pooler())
    errors.extend(_check_queue_limits(conf.QUEUES))
    return errors


def _check_queue_limits(queues: Any) -> list[Any]:
    """E021: ``PROCEDURES["QUEUES"]`` is read by every claim: a bad entry is refused at start-up."""
    from django_procedures.policy.limits import queue_limits

    if not isinstance(queues, dict):
        return [Error(f'PROCEDURES["QUEUES"] must be a dict of queue names to limits; got {queues!r}',
                      hint='For example {"email": {"concurrency": 10, "rate": (100, 60)}}.',
                      id="django_procedures.E021")]
    try:
        queue_limits(queues)
    except (TypeError, ValueError) as error:
        return [Error(str(error), hint='For example {"email": {"concurrency": 10, "rate": (100, 60)}}: at most 10 '
                      "running at once, at most 100 claims per 60 seconds; see docs/flow-control.md.",
                      id="django_procedures.E021")]
    return []


@register(Tags.compatibility)
def check_limits_methods(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """E022: a registered class's ``limits`` must be a method returning ``Limit`` values."""
    import inspect

    from django_procedures import registry
    from django_procedures.procedure import registered

    errors = []
    for name in registry.type_names():
        cls = registered(name)
        method = inspect.getattr_static(cls, "limits", None)
        if not callable(method) and not isinstance(method, staticmethod | classmethod):
            errors.append(Error(
                f"{cls.__qualname__}.limits must be a method, def limits(self): return [Limit...]; got "
                f"{type(method).__name__} {method!r}",
                hint="Limits may depend on the state, so they are a method: return [Limit.concurrency(name, max)] "
                     "or [Limit.rate(name, count, per)].", obj=cls, id="django_procedures.E022"))
    return errors


@register(Tags.database)
def check_schedules_ticked(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Any]:
    """W004: schedules are enabled, but nothing is set up to tick them (see ``store.tickers``).

    A database check: Django runs it for ``migrate`` and ``manage.py check --database default``, not for every
    command. A database that cannot be reached or is not migrated yet gives no warning (other checks, and
    ``migrate``, speak of those).
    """
    if not databases or "default" not in databases or conf.TICKER:
        return []
    from django_procedures.store.tickers import enabled_schedules, tickers

    try:
        with transaction.atomic():  # a savepoint: a missing table leaves a caller's transaction usable
            if not enabled_schedules() or tickers():
                return []
    except DatabaseError:
        return []
    return [Warning(
        "schedules are enabled, but nothing is set up to tick them: no procedures_worker --with-scheduler was seen "
        "in the last hour and no enabled Celery beat entry sends django_procedures.tick, so no schedule starts a run",
        hint="Run one procedures_worker with --with-scheduler; or add 'django_celery_beat' and "
             "'django_procedures.contrib.celery' to INSTALLED_APPS, migrate and run celery beat; or, if something "
             "else calls django_procedures.tick(), say what in PROCEDURES['TICKER'].",
        id="django_procedures.W004")]


@register(Tags.database)
def check_step_lists(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Any]:
    """W005: unfinished runs stand at steps their class's step list, at the same ``version``, no longer has there.

    A database check, like W004; a database that cannot be reached or is not migrated gives no warning.
    """
    if not databases or "default" not in databases:
        return []
    from django_procedures import registry
    from django_procedures.policy.versions import changed_without_version
    from django_procedures.procedure import registered
    from django_procedures.store.versions import positions

    classes = {name: registered(name) for name in registry.type_names()}
    stepped = [name for name, cls in classes.items() if not cls.uses_execute()]
    try:
        with transaction.atomic():  # a savepoint: a missing table leaves a caller's transaction usable
            found = positions(stepped) if stepped else []
    except DatabaseError:
        return []
    warnings = []
    for name in stepped:
        cls = classes[name]
        steps = [s.name for s in cls.steps]
        changed = changed_without_version(steps, cls.version, [p for p in found if p.type_name == name],
                                          cls.renamed_steps)
        if changed:
            stored = ", ".join(f"{p.step_name or '(finished)'!r} at position {p.step}" for p in changed[:3])
            warnings.append(Warning(
                f"{name} has unfinished runs of version {cls.version} standing at steps its step list no longer "
                f"has there ({stored}): its steps were added, removed or reordered without raising its version",
                hint=f"Set version = {cls.version + 1} on the class, map old step names in renamed_steps, and "
                     "reshape older states in upgrade_state; see docs/changing-procedures.md.",
                obj=cls, id="django_procedures.W005"))
    return warnings


def _check_tracing(tracing: Any) -> list[Any]:
    if tracing is not None and not isinstance(tracing, bool):
        return [Error(f"PROCEDURES['TRACING'] must be None, True or False; got {tracing!r}",
                      hint="None traces when the process has set an OpenTelemetry tracer provider; False never "
                           "traces.", id="django_procedures.E015")]
    if tracing is True:
        try:
            import opentelemetry.trace  # noqa: F401  (asked for: importing it is no cost to avoid)
        except ImportError:
            return [Error("PROCEDURES['TRACING'] is True, but opentelemetry-api is not installed",
                          hint="pip install 'django-procedures[otel]', or set TRACING to None (trace only when "
                               "OpenTelemetry is in use).", id="django_procedures.E016")]
    return []


def _default_database() -> dict[str, Any]:
    return connections.settings["default"] if hasattr(connections, "settings") else settings.DATABASES["default"]


def _check_pooler() -> list[Any]:
    """What cannot work through PgBouncer in transaction mode (see docs/scaling.md)."""
    from django_procedures.store.listening import PGBOUNCER_TRANSACTION, POOLERS

    pooler, alias = conf.POOLER, conf.LISTEN_DATABASE
    found: list[Any] = []
    if pooler not in POOLERS:
        found.append(Error(f"PROCEDURES['POOLER'] must be None or {PGBOUNCER_TRANSACTION!r}; got {pooler!r}",
                           hint="None when the default database is reached directly (or through a pooler in "
                                f"session mode); {PGBOUNCER_TRANSACTION!r} for PgBouncer in transaction mode.",
                           id="django_procedures.E017"))
    if alias is not None:
        if not isinstance(alias, str) or alias not in settings.DATABASES:
            found.append(Error(f"PROCEDURES['LISTEN_DATABASE'] must name an alias of DATABASES; got {alias!r}",
                               hint=f"Known aliases: {', '.join(map(repr, settings.DATABASES))}. Add one that "
                                    "reaches the default database directly, not through the pooler.",
                               id="django_procedures.E018"))
        elif "postgresql" not in settings.DATABASES[alias].get("ENGINE", ""):
            found.append(Error(f"PROCEDURES['LISTEN_DATABASE'] names {alias!r}, which is not PostgreSQL",
                               hint="LISTEN/NOTIFY is PostgreSQL's: name an alias of the same PostgreSQL database.",
                               id="django_procedures.E018"))
    if pooler != PGBOUNCER_TRANSACTION:
        return found
    if conf.LISTEN_NOTIFY and alias is None:
        found.append(Warning(
            "PROCEDURES['POOLER'] says the default database goes through PgBouncer in transaction mode, where "
            "LISTEN cannot work; idle workers and handle.wait() poll instead (every POLL_SECONDS)",
            hint="Add a DATABASES alias reaching PostgreSQL directly and name it in PROCEDURES['LISTEN_DATABASE'] "
                 "(one connection per worker process and per waiting handle), or set PROCEDURES['LISTEN_NOTIFY'] "
                 "= False to say polling is meant.",
            id="django_procedures.W002"))
    if conf.PREPARED_STATEMENTS:
        found.append(Warning(
            "PROCEDURES['PREPARED_STATEMENTS'] is on, but PgBouncer in transaction mode before 1.21 loses "
            "prepared statements between transactions ('prepared statement \"_pg3_0\" does not exist')",
            hint="Set PROCEDURES['PREPARED_STATEMENTS'] = False, or, with PgBouncer 1.21 or newer and "
                 "max_prepared_statements > 0, add 'django_procedures.W003' to SILENCED_SYSTEM_CHECKS.",
            id="django_procedures.W003"))
    return found


def _check_sqlite() -> list[Any]:
    found: list[Any] = []
    if str(_default_database().get("OPTIONS", {}).get("transaction_mode", "")).upper() != "IMMEDIATE":
        found.append(Warning(
            "the SQLite database does not use immediate transactions; a worker and a web process may fail "
            "with 'database is locked'",
            hint="Set DATABASES['default']['OPTIONS'] = {'transaction_mode': 'IMMEDIATE', 'timeout': 20, "
                 "'init_command': 'PRAGMA journal_mode=WAL;'}.",
            id="django_procedures.W001"))
    return found
