"""The migrations: one initial migration before the first release, and the helper later ones use to add an index
to a table in use (``_concurrently.py``)."""

from __future__ import annotations

import pytest
from django.db import connection, models
from django.db.migrations.loader import MigrationLoader
from django.test.utils import CaptureQueriesContext

from django_procedures.migrations._concurrently import add_index_concurrently

APP = "django_procedures"
NAME = "procedures_concurrently_test_idx"


def test_the_app_has_one_migration_until_it_is_released():
    # 0.1.0 is unreleased: the development chain was squashed, so no database is left half-way along it.
    on_disk = {name for app, name in MigrationLoader(None, ignore_no_migrations=True).disk_migrations if app == APP}
    assert on_disk == {"0001_initial"}


def _index_names() -> set[str]:
    with connection.cursor() as cursor:
        return set(connection.introspection.get_constraints(cursor, "django_procedures_procedurerun"))


@pytest.fixture
def no_test_index():
    """Drops the test's index afterwards: a transactional test's flush empties tables, it does not drop indexes."""
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX IF EXISTS {NAME}")


@pytest.mark.django_db(transaction=True)  # outside a transaction, as a migration with atomic = False runs
def test_an_index_added_concurrently_is_in_the_state_and_the_database_and_comes_off_again(no_test_index):
    operation = add_index_concurrently("procedurerun", models.Index(fields=["step_name"], name=NAME))
    before = MigrationLoader(connection).project_state()
    after = before.clone()
    operation.state_forwards(APP, after)
    assert NAME in [index.name for index in after.models[APP, "procedurerun"].options["indexes"]]

    with CaptureQueriesContext(connection) as built, connection.schema_editor(atomic=False) as editor:
        operation.database_forwards(APP, editor, before, after)
    assert NAME in _index_names()
    made = [q["sql"] for q in built if NAME in q["sql"] and "CREATE INDEX" in q["sql"]]
    assert len(made) == 1, made
    assert ("CONCURRENTLY" in made[0]) == (connection.vendor == "postgresql"), made[0]

    with connection.schema_editor(atomic=False) as editor:
        operation.database_backwards(APP, editor, after, before)
    assert NAME not in _index_names()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_index_left_by_an_interrupted_build_is_built_again(no_test_index):
    with connection.cursor() as cursor:  # what an interrupted CREATE INDEX CONCURRENTLY leaves: an index by that name
        cursor.execute(f"CREATE INDEX {NAME} ON django_procedures_procedurerun (queue)")
    operation = add_index_concurrently("procedurerun", models.Index(fields=["step_name"], name=NAME))
    before = MigrationLoader(connection).project_state()
    after = before.clone()
    operation.state_forwards(APP, after)
    with connection.schema_editor(atomic=False) as editor:
        operation.database_forwards(APP, editor, before, after)
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [NAME])
        assert "(step_name)" in cursor.fetchone()[0]
