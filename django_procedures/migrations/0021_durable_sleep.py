"""Durable sleep: a waiting procedure says what it waits for (``waiting_for``) and when a timer falls due
(``wake_at``); the wake pass and the next wake time read ``procedures_wake_idx``, so the claim never scans sleepers.

Procedures waiting before this migration all wait for their children. The columns have constant defaults
(PostgreSQL adds them without rewriting the table); the index is built ``CONCURRENTLY`` on PostgreSQL
(``_concurrently.py``), so the migration is not atomic.
"""

from django.db import migrations, models

from django_procedures.migrations._concurrently import add_index_concurrently

INDEX = models.Index(condition=models.Q(status="waiting", wake_at__isnull=False), fields=["wake_at"],
                     name="procedures_wake_idx")


def waiting_for_children(apps, schema_editor) -> None:
    run = apps.get_model("django_procedures", "ProcedureRun")
    run.objects.filter(status="waiting", waiting_for="").update(waiting_for="children")


class Migration(migrations.Migration):

    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ('django_procedures', '0020_worker_with_scheduler'),
    ]

    operations = [
        migrations.AddField(
            model_name='procedurerun',
            name='waiting_for',
            field=models.CharField(blank=True, default='', max_length=10),
        ),
        migrations.AddField(
            model_name='procedurerun',
            name='wake_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(waiting_for_children, migrations.RunPython.noop),
        add_index_concurrently("procedurerun", INDEX),
    ]
