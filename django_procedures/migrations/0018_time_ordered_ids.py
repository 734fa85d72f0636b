"""New procedures get time-ordered ids, and the procedures' table leaves room in each page for updates.

Two causes of the same cost: beside ten million procedures of history, every new procedure made
PostgreSQL read a page it no longer had in memory and write it whole to the WAL after each checkpoint
(eight full pages per no-op procedure, against none beside an empty table; docs/scaling.md).

- Ids are UUIDs of version 7 (``policy.ids.new_id``): new procedures' entries go to the last pages of
  the primary key and of the steps' and leases' keys to their procedure, instead of a random page of each.
- ``fillfactor = 70`` on PostgreSQL: a claim or a finish writes a new version of its row (the status is
  indexed, so the update is never HOT). With pages packed full it went wherever the free space map knew
  of room, which beside a long history is a random old page; with 30 % of each new page kept free it
  stays in its own page. Pages written before this migration keep their packing.
"""

from django.db import migrations, models

import django_procedures.policy.ids

TABLE = "django_procedures_procedurerun"


def leave_room(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} SET (fillfactor = 70)")


def pack_full(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} RESET (fillfactor)")


class Migration(migrations.Migration):

    dependencies = [
        ('django_procedures', '0017_error_rows_newest_first'),
    ]

    operations = [
        migrations.AlterField(
            model_name='procedurerun',
            name='id',
            field=models.UUIDField(default=django_procedures.policy.ids.new_id, editable=False, primary_key=True,
                                   serialize=False),
        ),
        migrations.RunPython(leave_room, pack_full),
    ]
