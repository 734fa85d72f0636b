"""The failures a manual retry would run again, newest first: the admin's "retryable failures" filter.

Its capped count read the table until it had found 10,001 of them (100 ms beside ten million
procedures, more as the table's pages hold fewer rows); with this index the count and the page read
one range of a small index. Partial: a row enters it only when it fails for good.

Built ``CONCURRENTLY`` on PostgreSQL, so workers keep writing while it is built (outside a
transaction: the migration is not atomic); a plain ``CREATE INDEX`` elsewhere.
"""

from django.db import migrations, models

INDEX = models.Index(condition=models.Q(status="failed", failure_can_retry=True), fields=["created_at", "id"],
                     name="procedures_retryable_idx")


def _concurrently(schema_editor) -> bool:
    connection = schema_editor.connection
    return connection.vendor == "postgresql" and not connection.in_atomic_block


def add(apps, schema_editor) -> None:
    model = apps.get_model("django_procedures", "ProcedureRun")
    if _concurrently(schema_editor):
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX.name}")  # left invalid by an interrupted run
        schema_editor.add_index(model, INDEX, concurrently=True)
    else:
        schema_editor.add_index(model, INDEX)


def remove(apps, schema_editor) -> None:
    model = apps.get_model("django_procedures", "ProcedureRun")
    if _concurrently(schema_editor):
        schema_editor.remove_index(model, INDEX, concurrently=True)
    else:
        schema_editor.remove_index(model, INDEX)


class Migration(migrations.Migration):

    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ('django_procedures', '0018_time_ordered_ids'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="procedurerun", index=INDEX)],
            database_operations=[migrations.RunPython(add, remove)],
        ),
    ]
