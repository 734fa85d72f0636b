"""Whether the database has django-procedures' tables: a clear "run migrate" instead of a loop of SQL errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.apps import apps
from django.db import DatabaseError, connection

from django_procedures.exceptions import ProceduresNotMigrated
from django_procedures.store.db import sqlstate

#: PostgreSQL's undefined_table.
_UNDEFINED_TABLE = "42P01"


def missing_tables() -> list[str]:
    """The tables of django-procedures' models that the default database lacks (a catalog read)."""
    present = set(connection.introspection.table_names())
    models = apps.get_app_config("django_procedures").get_models()
    return sorted(m._meta.db_table for m in models if m._meta.db_table not in present)


def not_migrated(missing: list[str]) -> ProceduresNotMigrated:
    name = connection.settings_dict.get("NAME")
    tables = f" (missing: {', '.join(missing)})" if missing else ""
    return ProceduresNotMigrated(
        f"the database {name!r} has no django-procedures tables{tables}: run "
        "`python manage.py migrate` on it first (or point DATABASES['default'] at the migrated database)")


def require_tables() -> None:
    """Raise :class:`ProceduresNotMigrated` unless every table of django-procedures exists."""
    missing = missing_tables()
    if missing:
        raise not_migrated(missing)


def is_missing_table(error: BaseException) -> bool:
    """The statement named a table that does not exist (PostgreSQL's 42P01, SQLite's "no such table")."""
    if not isinstance(error, DatabaseError):
        return False
    if connection.vendor == "sqlite":
        return "no such table" in str(error)
    return sqlstate(error) == _UNDEFINED_TABLE


@contextmanager
def tables_required() -> Iterator[None]:
    """Turn "relation ... does not exist" from statements on django-procedures' own tables into
    :class:`ProceduresNotMigrated` (wrap only statements that touch no other table)."""
    try:
        yield
    except DatabaseError as error:
        if is_missing_table(error):
            raise not_migrated([]) from error
        raise
