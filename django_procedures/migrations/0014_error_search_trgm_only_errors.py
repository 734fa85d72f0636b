"""The trigram index of errors (0011) holds only the procedures that have an error.

0011 indexed every procedure that is not ``done``, so every procedure wrote it twice on its way through:
when submitted (``ready``) and when claimed (``running``), each time a GIN entry for an empty error,
and every few thousand of those a backend that happened to be claiming paid for moving GIN's pending
list into the index. A search by error words only ever matches a row with an error, so the admin's
search now says ``error <> ''`` too, and the index is partial to those rows: the procedures that
succeed at their first attempt never touch it.

PostgreSQL only, and only where 0011 made the index (``pg_trgm`` could be created). The new index is
built ``CONCURRENTLY`` under another name, then takes the old one's place, so the search keeps an
index meanwhile and workers keep writing.
"""

from django.db import migrations

INDEX = "procedures_error_trgm_idx"
BUILDING = "procedures_error_trgm_idx_new"
# 'done' is RunStatus.DONE: a migration does not import the app's code, which may change after it.
ONLY_ERRORS = "status <> 'done' AND error <> ''"
NOT_DONE = "status <> 'done'"


def _rebuild(apps, schema_editor, predicate: str) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    table = connection.ops.quote_name(apps.get_model("django_procedures", "ProcedureRun")._meta.db_table)
    concurrently = "" if connection.in_atomic_block else "CONCURRENTLY"
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(%s)", [INDEX])
        if cursor.fetchone() is None:  # 0011 made none: pg_trgm could not be created here
            return
        cursor.execute(f"DROP INDEX {concurrently} IF EXISTS {BUILDING}")  # left by an interrupted run
        cursor.execute(f"CREATE INDEX {concurrently} {BUILDING} ON {table} "
                       f"USING gin (UPPER(error) gin_trgm_ops) WHERE {predicate}")
        cursor.execute(f"DROP INDEX {concurrently} {INDEX}")
        cursor.execute(f"ALTER INDEX {BUILDING} RENAME TO {INDEX}")


def only_errors(apps, schema_editor) -> None:
    _rebuild(apps, schema_editor, ONLY_ERRORS)


def every_unfinished(apps, schema_editor) -> None:
    _rebuild(apps, schema_editor, NOT_DONE)


class Migration(migrations.Migration):

    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ('django_procedures', '0013_foreign_keys_not_enforced'),
    ]

    operations = [
        migrations.RunPython(only_errors, every_unfinished),
    ]
