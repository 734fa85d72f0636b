"""Two indexes of leases by claim time that nothing reads.

``procedures_open_lease_idx`` (open leases by claim time) and ``procedures_lease_claimed_idx`` (every lease by
claim time) came with the first schema; every read of leases since goes by procedure (the ``(procedure,
token)`` constraint's index): the lease close, the admin's page, the tasks backend, retention. Each claim
wrote both, and each lease close wrote the second again (and, with ``released_at`` in the first's predicate,
could never be a heap-only update): four index entries per claim for nothing.
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('django_procedures', '0014_error_search_trgm_only_errors'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='lease',
            name='procedures_open_lease_idx',
        ),
        migrations.RemoveIndex(
            model_name='lease',
            name='procedures_lease_claimed_idx',
        ),
    ]
