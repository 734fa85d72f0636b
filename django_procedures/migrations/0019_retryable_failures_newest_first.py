"""The failures a manual retry would run again, newest first: the admin's "retryable failures" filter.

Its capped count read the table until it had found 10,001 of them (100 ms beside ten million
procedures, more as the table's pages hold fewer rows); with this index the count and the page read
one range of a small index. Partial: a row enters it only when it fails for good.

Built ``CONCURRENTLY`` on PostgreSQL (``_concurrently.py``); the migration is not atomic.
"""

from django.db import migrations, models

from django_procedures.migrations._concurrently import add_index_concurrently

INDEX = models.Index(condition=models.Q(status="failed", failure_can_retry=True), fields=["created_at", "id"],
                     name="procedures_retryable_idx")


class Migration(migrations.Migration):

    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ('django_procedures', '0018_time_ordered_ids'),
    ]

    operations = [add_index_concurrently("procedurerun", INDEX)]
