"""Step.traceback: every failed attempt keeps its own traceback, not only the latest (on the run)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_procedures', '0008_index_finished_at_for_charts'),
    ]

    operations = [
        migrations.AddField(
            model_name='step',
            name='traceback',
            field=models.TextField(blank=True, db_default='', default=''),
        ),
    ]
