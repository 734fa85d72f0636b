from django.db import migrations, models


class Migration(migrations.Migration):
    """The procedure class's version each run was written by (a constant default: PostgreSQL 11 and later add the
    column without rewriting the table)."""

    dependencies = [
        ('django_procedures', '0020_worker_with_scheduler'),
    ]

    operations = [
        migrations.AddField(
            model_name='procedurerun',
            name='version',
            field=models.PositiveIntegerField(default=1, db_default=1),
        ),
    ]
