"""A trigram index on the error of procedures that are not done, for the admin's search by words.

The admin's search box matches words of an error with ``UPPER(error) LIKE UPPER('%words%')`` over the
procedures that are not ``done`` (``done`` clears the error). Without an index that reads every such row:
8,400 buffers and 150 ms beside 1,000,000 procedures (70,500 not done), 5.6 s at ten million for words found
nowhere. With this GIN index of ``UPPER(error)`` trigrams, partial to those rows, it reads 15 buffers.

PostgreSQL only, and only where the ``pg_trgm`` extension can be created (it ships with PostgreSQL's contrib
package and is a trusted extension since PostgreSQL 13: the database's owner may create it). Elsewhere the
migration logs a warning and changes nothing, and the search works as before, reading the rows; an operator
may create the extension and the index later (``docs/operators-guide.md``). The index is built
``CONCURRENTLY`` when the migration runs outside a transaction, so workers keep writing meanwhile. It is not
in the model's ``Meta.indexes``: Django cannot declare an index that exists only on some databases.
"""

import logging

from django.db import DatabaseError, migrations, transaction

logger = logging.getLogger("django_procedures")

INDEX = "procedures_error_trgm_idx"
EXTENSION_SQL = "CREATE EXTENSION IF NOT EXISTS pg_trgm"
# 'done' is RunStatus.DONE: a migration does not import the app's code, which may change after it.
INDEX_SQL = ("CREATE INDEX {concurrently} IF NOT EXISTS {index} ON {table} "
             "USING gin (UPPER(error) gin_trgm_ops) WHERE status <> 'done'")


def create_error_search_index(apps, schema_editor) -> bool:
    """Create the index if this is PostgreSQL and ``pg_trgm`` can be created; True if the index exists."""
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return False
    table = connection.ops.quote_name(apps.get_model("django_procedures", "ProcedureRun")._meta.db_table)
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(EXTENSION_SQL)
    except DatabaseError as error:
        logger.warning("django_procedures: no trigram index for the admin's search by error words (%s): "
                       "CREATE EXTENSION pg_trgm failed: %s. The search still works, reading every procedure "
                       "that is not done; see docs/operators-guide.md to add the index later.", INDEX, error)
        return False
    concurrently = "" if connection.in_atomic_block else "CONCURRENTLY"
    with connection.cursor() as cursor:
        cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [INDEX])
        row = cursor.fetchone()
        if row is not None and not row[0]:  # left invalid by an interrupted concurrent build: build it again
            cursor.execute(f"DROP INDEX {concurrently} {INDEX}")
        cursor.execute(INDEX_SQL.format(concurrently=concurrently, index=INDEX, table=table))
    return True


def drop_error_search_index(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):

    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ('django_procedures', '0010_index_key_waiters'),
    ]

    operations = [
        migrations.RunPython(create_error_search_index, drop_error_search_index),
    ]
