"""An index built ``CONCURRENTLY`` on PostgreSQL, so workers keep writing while it is built; a plain
``CREATE INDEX`` elsewhere. A migration using it sets ``atomic = False`` (CONCURRENTLY cannot run in a
transaction). Not a migration itself: the loader skips modules whose names start with ``_``.

For a migration that adds an index to a table in use, after 0.1.0: the initial migration creates its
indexes on empty tables, plainly (``tests/test_migrations.py`` exercises this helper).
"""

from django.db import migrations, models


def _concurrently(schema_editor) -> bool:
    connection = schema_editor.connection
    return connection.vendor == "postgresql" and not connection.in_atomic_block


def add_index_concurrently(model_name: str, index: models.Index) -> migrations.SeparateDatabaseAndState:
    """The operation that adds ``index`` to ``model_name`` of this app (and removes it when unapplied)."""

    def add(apps, schema_editor) -> None:
        model = apps.get_model("django_procedures", model_name)
        if _concurrently(schema_editor):
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index.name}")  # left invalid by an interruption
            schema_editor.add_index(model, index, concurrently=True)
        else:
            schema_editor.add_index(model, index)

    def remove(apps, schema_editor) -> None:
        model = apps.get_model("django_procedures", model_name)
        if _concurrently(schema_editor):
            schema_editor.remove_index(model, index, concurrently=True)
        else:
            schema_editor.remove_index(model, index)

    return migrations.SeparateDatabaseAndState(
        state_operations=[migrations.AddIndex(model_name=model_name, index=index)],
        database_operations=[migrations.RunPython(add, remove)],
    )
