"""The schema of django-procedures 0.1.0: the development migrations 0001-0020, squashed before the first release.

Besides the models (their fields in the column order the old chain left them in), three things only
PostgreSQL gets, skipped elsewhere:

- a trigger that NOTIFYs an awaited procedure's own channel when it reaches a final status, for
  ``ProcedureHandle.wait()``. A trigger rather than a statement in each final transition: no final path (a
  step, the sweep, a cancel, a deadlock victim) can forget it. Only rows marked ``awaited`` notify (the
  ``WHEN`` clause is checked without calling the function): a NOTIFY takes PostgreSQL's notification lock
  at commit, which would serialise every completion. The channel is ``django_procedures_finished_<id in
  hex>``, the payload the final status;
- ``fillfactor = 70`` on the procedures' table: a claim or a finish writes a new version of its row (the
  status is indexed, so never a heap-only update), and with room kept in each page it stays in its page
  instead of going to a random old one beside a long history (docs/scaling.md);
- a trigram index (``pg_trgm``, GIN) of ``UPPER(error)`` over the procedures with an error, for the admin's
  search by error words. Only where the extension can be created (contrib; a trusted extension since
  PostgreSQL 13): elsewhere a warning, no index, and the search reads the rows (docs/operators-guide.md
  says how to add it later). Not in ``Meta.indexes``: Django cannot declare an index only some databases have.

The indexes the development chain built ``CONCURRENTLY`` on tables in use are created here like the others,
with the same names and predicates: this runs on empty tables, in one transaction. A later migration that
adds an index to a table in use builds it with ``_concurrently.add_index_concurrently``.
"""

import datetime
import logging

import django.db.models.deletion
import django.utils.timezone
import model_utils.fields
from django.db import DatabaseError, migrations, models, transaction

import django_procedures.policy.ids
import django_procedures.policy.schedule
import django_procedures.policy.state
import django_procedures.policy.status

logger = logging.getLogger("django_procedures")

TABLE = "django_procedures_procedurerun"

NOTIFY_FINISHED = """
CREATE OR REPLACE FUNCTION django_procedures_notify_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('django_procedures_finished_' || replace(NEW.id::text, '-', ''), NEW.status);
    RETURN NULL;
END
$$;
CREATE TRIGGER django_procedures_notify_finished
    AFTER UPDATE OF status ON django_procedures_procedurerun
    FOR EACH ROW
    WHEN (NEW.awaited AND NEW.status IN ('done', 'failed', 'rolled_back', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION django_procedures_notify_finished();
"""

NO_NOTIFY_FINISHED = """
DROP TRIGGER IF EXISTS django_procedures_notify_finished ON django_procedures_procedurerun;
DROP FUNCTION IF EXISTS django_procedures_notify_finished();
"""

INDEX = "procedures_error_trgm_idx"
EXTENSION_SQL = "CREATE EXTENSION IF NOT EXISTS pg_trgm"
# 'done' is RunStatus.DONE written out: this index must not change with the app's code.
INDEX_SQL = (f"CREATE INDEX IF NOT EXISTS {INDEX} ON {TABLE} "
             "USING gin (UPPER(error) gin_trgm_ops) WHERE status <> 'done' AND error <> ''")


def notify_finished(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(NOTIFY_FINISHED)


def no_notify_finished(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(NO_NOTIFY_FINISHED)


def leave_room(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} SET (fillfactor = 70)")


def create_error_search_index(apps, schema_editor) -> bool:
    """Create the index if this is PostgreSQL and ``pg_trgm`` can be created; True if the index exists."""
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return False
    try:
        # A savepoint: a failed CREATE EXTENSION must not abort the migration's transaction.
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(EXTENSION_SQL)
    except DatabaseError as error:
        logger.warning("django_procedures: no trigram index for the admin's search by error words (%s): "
                       "CREATE EXTENSION pg_trgm failed: %s. The search still works, reading every procedure "
                       "that has an error; see docs/operators-guide.md to add the index later.", INDEX, error)
        return False
    with connection.cursor() as cursor:
        cursor.execute(INDEX_SQL)
    return True


class Migration(migrations.Migration):

    initial = True

    dependencies = [
    ]

    operations = [
        migrations.CreateModel(
            name='Rollup',
            fields=[
                ('name', models.CharField(max_length=50, primary_key=True, serialize=False)),
                ('began', models.DateTimeField()),
                ('until', models.DateTimeField()),
            ],
            options={
                'abstract': False,
            },
        ),
        migrations.CreateModel(
            name='FinishedCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('minute', models.DateTimeField(help_text='Start of the minute (UTC) the procedures finished in.')),
                ('type_name', models.CharField(max_length=255)),
                ('status', models.CharField(max_length=20)),
                ('count', models.PositiveIntegerField()),
                ('last_finished_at', models.DateTimeField(help_text='The latest of their finish times.')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('minute', 'type_name', 'status'), name='procedures_finished_count_uniq')],
            },
        ),
        migrations.CreateModel(
            name='Schedule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=200, unique=True)),
                ('procedure', models.CharField(help_text='Type name of the procedure to start.', max_length=255)),
                ('state', models.JSONField(blank=True, default=dict, encoder=django_procedures.policy.state.StateEncoder, help_text='State of every run (a JSON object).')),
                ('mode', models.CharField(choices=[('fixed_delay', 'fixed delay'), ('fixed_rate', 'fixed rate'), ('fixed_rate_overlap', 'fixed rate overlap')], default=django_procedures.policy.schedule.Mode['FIXED_RATE'], max_length=20)),
                ('period', models.DurationField(blank=True, null=True)),
                ('cron', models.CharField(blank=True, max_length=100)),
                ('timezone', models.CharField(blank=True, help_text='For cron; default TIME_ZONE.', max_length=64)),
                ('initial_delay', models.DurationField(blank=True, default=datetime.timedelta(0))),
                ('max_concurrency', models.PositiveIntegerField(default=1)),
                ('missed', models.CharField(choices=[('skip', 'skip'), ('coalesce_latest', 'coalesce latest'), ('catch_up', 'catch up')], default=django_procedures.policy.schedule.Missed['SKIP'], max_length=20)),
                ('max_pending', models.PositiveIntegerField(default=0)),
                ('max_run_time', models.DurationField(blank=True, null=True)),
                ('queue', models.CharField(blank=True, max_length=100)),
                ('enabled', models.BooleanField(default=True)),
                ('disabled_reason', models.TextField(blank=True)),
                ('from_code', models.BooleanField(default=False, editable=False)),
                ('next_tick_at', models.DateTimeField(blank=True, null=True)),
                ('pending_ticks', models.JSONField(blank=True, default=list, editable=False)),
                ('active_runs', models.PositiveIntegerField(default=0, editable=False)),
                ('runs', models.PositiveIntegerField(default=0, editable=False)),
                ('failures', models.PositiveIntegerField(default=0, editable=False)),
                ('skips', models.PositiveIntegerField(default=0, editable=False)),
                ('overlaps', models.PositiveIntegerField(default=0, editable=False)),
                ('last_tick_at', models.DateTimeField(blank=True, editable=False, null=True)),
                ('last_drift_ms', models.BigIntegerField(blank=True, editable=False, null=True)),
                ('last_elapsed_ms', models.BigIntegerField(blank=True, editable=False, null=True)),
                ('max_elapsed_ms', models.BigIntegerField(blank=True, editable=False, null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('last_error', models.TextField(blank=True, editable=False)),
                ('last_error_at', models.DateTimeField(blank=True, editable=False, null=True)),
            ],
            options={
                'ordering': ['name'],
                'permissions': [('pause_schedule', 'Can pause schedules'), ('resume_schedule', 'Can resume schedules'), ('trigger_schedule', 'Can trigger schedules now')],
                'indexes': [models.Index(condition=models.Q(('enabled', True)), fields=['next_tick_at'], name='procedures_due_sched_idx')],
                'constraints': [models.CheckConstraint(condition=models.Q(('period__isnull', True), ('period__gt', datetime.timedelta(0)), _connector='OR'), name='procedures_schedule_period_positive'), models.CheckConstraint(condition=models.Q(models.Q(('mode', 'fixed_delay'), _negated=True), ('period__isnull', False), _connector='OR'), name='procedures_schedule_fixed_delay_period'), models.CheckConstraint(condition=models.Q(('period__isnull', False), models.Q(('cron', ''), _negated=True), _connector='OR'), name='procedures_schedule_has_cadence'), models.CheckConstraint(condition=models.Q(models.Q(('max_concurrency__gte', 2), ('mode', 'fixed_rate_overlap')), models.Q(models.Q(('mode', 'fixed_rate_overlap'), _negated=True), ('max_concurrency', 1)), _connector='OR'), name='procedures_schedule_concurrency_fits_mode'), models.CheckConstraint(condition=models.Q(models.Q(('missed', 'catch_up'), _negated=True), ('max_pending__gte', 1), _connector='OR'), name='procedures_schedule_catch_up_pending')],
            },
        ),
        migrations.CreateModel(
            name='ProcedureRun',
            fields=[
                ('id', models.UUIDField(default=django_procedures.policy.ids.new_id, editable=False, primary_key=True, serialize=False)),
                ('type_name', models.CharField(max_length=255)),
                ('state', models.JSONField(default=dict, encoder=django_procedures.policy.state.StateEncoder)),
                ('status', models.CharField(choices=[('ready', 'ready'), ('running', 'running'), ('waiting', 'waiting'), ('retrying', 'retrying'), ('done', 'done'), ('failed', 'failed'), ('rolling_back', 'rolling back'), ('rolled_back', 'rolled back'), ('cancelled', 'cancelled')], default=django_procedures.policy.status.RunStatus['READY'], max_length=20)),
                ('step', models.PositiveIntegerField(default=0)),
                ('step_name', models.CharField(blank=True, max_length=255)),
                ('step_started_at', models.DateTimeField(blank=True, null=True)),
                ('attempt', models.PositiveIntegerField(default=1)),
                ('failures', models.PositiveIntegerField(default=0)),
                ('lost', models.PositiveIntegerField(default=0)),
                ('in_unsafe_step', models.BooleanField(default=False)),
                ('depth', models.PositiveIntegerField(default=0)),
                ('pending_children', models.PositiveIntegerField(default=0)),
                ('suspension', models.PositiveIntegerField(default=0)),
                ('spawned_in', models.PositiveIntegerField(default=0)),
                ('position', models.PositiveIntegerField(default=0)),
                ('failure_handled', models.BooleanField(default=False)),
                ('lock_keys', models.JSONField(blank=True, default=list)),
                ('keys_held', models.BooleanField(default=False)),
                ('waiting_for_keys', models.BooleanField(default=False)),
                ('limits', models.JSONField(blank=True, null=True)),
                ('in_rollback', models.BooleanField(default=False)),
                ('rollback_error', models.TextField(blank=True)),
                ('queue', models.CharField(default='default', max_length=100)),
                ('priority', models.IntegerField(default=0)),
                ('key', models.CharField(blank=True, max_length=255, null=True)),
                ('run_at', models.DateTimeField()),
                ('lease_token', models.BigIntegerField(default=0)),
                ('lease_owner', models.CharField(blank=True, max_length=255)),
                ('lease_expires_at', models.DateTimeField(blank=True, null=True)),
                ('tick_at', models.DateTimeField(blank=True, help_text='The schedule tick this run stands for.', null=True)),
                ('output', models.JSONField(blank=True, encoder=django_procedures.policy.state.StateEncoder, null=True)),
                ('error', models.TextField(blank=True)),
                ('traceback', models.TextField(blank=True)),
                ('failed_step', models.CharField(blank=True, max_length=255)),
                ('failure_can_retry', models.BooleanField(default=False)),
                ('created_at', model_utils.fields.AutoCreatedField(default=django.utils.timezone.now, editable=False)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('retried_at', models.DateTimeField(blank=True, null=True)),
                ('retried_by', models.CharField(blank=True, max_length=255)),
                ('manual_retries', models.PositiveIntegerField(default=0)),
                ('parent', models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='children', to='django_procedures.procedurerun')),
                ('root', models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='descendants', to='django_procedures.procedurerun')),
                ('schedule', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='procedure_runs', to='django_procedures.schedule')),
                ('awaited', models.BooleanField(default=False)),
                ('progress', models.JSONField(blank=True, null=True)),
                ('progress_updated_at', models.DateTimeField(blank=True, null=True)),
                ('trace_context', models.JSONField(blank=True, null=True)),
                ('waiting_for', models.CharField(blank=True, db_default='', default='', max_length=10)),
                ('wake_at', models.DateTimeField(blank=True, null=True)),
                ('version', models.PositiveIntegerField(db_default=1, default=1)),
                ('submitted_state', models.JSONField(blank=True, encoder=django_procedures.policy.state.StateEncoder, null=True)),
                ('rerun_of', models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='reruns', to='django_procedures.procedurerun')),
                ('waiting_events', models.JSONField(blank=True, null=True)),
            ],
            options={
                'verbose_name': 'procedure',
                'permissions': [('retry_procedurerun', 'Can retry failed procedures'), ('cancel_procedurerun', 'Can cancel procedures and their sub-procedures'), ('rerun_procedurerun', 'Can re-run finished procedures from a step'), ('send_event_procedurerun', 'Can send events to procedures')],
            },
        ),
        migrations.CreateModel(
            name='Step',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('index', models.PositiveIntegerField()),
                ('name', models.CharField(max_length=255)),
                ('attempt', models.PositiveIntegerField()),
                ('status', models.CharField(choices=[('done', 'done'), ('failed', 'failed'), ('lost', 'lost')], max_length=10)),
                ('lease_token', models.BigIntegerField(default=0)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField()),
                ('error', models.TextField(blank=True)),
                ('state', models.JSONField(blank=True, encoder=django_procedures.policy.state.StateEncoder, null=True)),
                ('procedure', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='steps', to='django_procedures.procedurerun')),
                ('traceback', models.TextField(blank=True, db_default='', default='')),
            ],
            options={
                'ordering': ['procedure', 'index', 'attempt'],
            },
        ),
        migrations.CreateModel(
            name='Worker',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('worker_id', models.CharField(max_length=255)),
                ('hostname', models.CharField(max_length=255)),
                ('pid', models.PositiveIntegerField()),
                ('version', models.CharField(blank=True, help_text='django-procedures version it runs.', max_length=50)),
                ('queues', models.JSONField(blank=True, default=list, help_text='Queues it serves; empty: every queue.')),
                ('concurrency', models.PositiveIntegerField()),
                ('lease_seconds', models.FloatField()),
                ('started_at', models.DateTimeField()),
                ('last_seen_at', models.DateTimeField()),
                ('alive_until', models.DateTimeField(help_text='Gone if not renewed by then (database clock).')),
                ('stopped_at', models.DateTimeField(blank=True, null=True)),
                ('stop_reason', models.CharField(blank=True, choices=[('sigterm', 'SIGTERM'), ('sigint', 'SIGINT'), ('burst', 'drained (--burst)'), ('error', 'error'), ('other', 'stopped')], max_length=10)),
                ('stop_detail', models.TextField(blank=True)),
                ('with_scheduler', models.BooleanField(default=False, help_text='Started with --with-scheduler: it ticks schedules.')),
            ],
            options={
                'indexes': [models.Index(condition=models.Q(('stopped_at__isnull', True)), fields=['alive_until'], name='procedures_worker_live_idx'), models.Index(fields=['last_seen_at'], name='procedures_worker_seen_idx')],
            },
        ),
        migrations.CreateModel(
            name='Lease',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('token', models.BigIntegerField()),
                ('worker', models.CharField(max_length=255)),
                ('claimed_at', models.DateTimeField()),
                ('expires_at', models.DateTimeField(blank=True, null=True)),
                ('released_at', models.DateTimeField(blank=True, null=True)),
                ('outcome', models.CharField(blank=True, choices=[('completed', 'completed'), ('retried', 'retried'), ('failed', 'failed'), ('released', 'released'), ('expired', 'expired'), ('lost', 'lost')], max_length=10)),
                ('limits', models.JSONField(blank=True, null=True)),
                ('procedure', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='leases', to='django_procedures.procedurerun')),
            ],
            options={
                'ordering': ['procedure', 'token'],
                'constraints': [models.UniqueConstraint(fields=('procedure', 'token'), name='procedures_lease_token')],
            },
        ),
        migrations.CreateModel(
            name='LimitUse',
            fields=[
                ('name', models.CharField(max_length=200, primary_key=True, serialize=False)),
                ('max', models.PositiveIntegerField(blank=True, null=True)),
                ('per', models.FloatField(blank=True, null=True)),
                ('waiting', models.JSONField(blank=True, default=list)),
            ],
            options={
                'verbose_name': 'limit',
                'verbose_name_plural': 'limits',
                'ordering': ['name'],
            },
        ),
        migrations.CreateModel(
            name='LimitSlot',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=200)),
                ('rate', models.BooleanField(default=False)),
                ('slot', models.PositiveIntegerField()),
                ('holder_id', models.UUIDField(blank=True, null=True)),
                ('holder_token', models.BigIntegerField(blank=True, null=True)),
                ('free_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'ordering': ['name', 'rate', 'slot'],
                'indexes': [models.Index(condition=models.Q(('holder_id__isnull', True), ('rate', False)), fields=['name', 'slot'], name='procedures_limit_free_idx'), models.Index(condition=models.Q(('rate', True)), fields=['name', 'free_at'], name='procedures_limit_rate_idx'), models.Index(condition=models.Q(('holder_id__isnull', False)), fields=['holder_id'], name='procedures_limit_holder_idx')],
                'constraints': [models.UniqueConstraint(fields=('name', 'rate', 'slot'), name='procedures_limit_slot')],
            },
        ),
        migrations.CreateModel(
            name='KeyRequest',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=255)),
                ('mode', models.CharField(choices=[('exclusive', 'exclusive'), ('shared', 'shared')], max_length=10)),
                ('granted', models.BooleanField(default=False)),
                ('requested_at', models.DateTimeField()),
                ('procedure', models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='key_requests', to='django_procedures.procedurerun')),
                ('root', models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='django_procedures.procedurerun')),
            ],
            options={
                'ordering': ['name', 'requested_at', 'id'],
                'indexes': [models.Index(fields=['name', 'granted'], name='procedures_key_idx')],
                'constraints': [models.UniqueConstraint(fields=('name', 'procedure'), name='procedures_key_request_once')],
            },
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('limits__isnull', True), ('status__in', (django_procedures.policy.status.RunStatus['READY'], django_procedures.policy.status.RunStatus['RETRYING']))), fields=['-priority', 'run_at'], name='procedures_claim_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('limits__isnull', False), ('status__in', (django_procedures.policy.status.RunStatus['READY'], django_procedures.policy.status.RunStatus['RETRYING']))), fields=['-priority', 'run_at'], name='procedures_limited_claim_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('keys_held', False), ('status__in', (django_procedures.policy.status.RunStatus['READY'], django_procedures.policy.status.RunStatus['RETRYING'])), ('waiting_for_keys', False), models.Q(('lock_keys', []), _negated=True)), fields=['-priority', 'run_at'], name='procedures_key_claim_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('status__in', (django_procedures.policy.status.RunStatus['READY'], django_procedures.policy.status.RunStatus['RETRYING']))), fields=['run_at'], name='procedures_due_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('status__in', (django_procedures.policy.status.RunStatus['RUNNING'], django_procedures.policy.status.RunStatus['ROLLING_BACK']))), fields=['lease_expires_at'], name='procedures_lease_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('parent__isnull', False)), fields=['parent'], name='procedures_parent_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('root__isnull', False)), fields=['root'], name='procedures_root_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('waiting_for_keys', True)), fields=['id'], name='procedures_key_waiters_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('status', 'waiting'), ('waiting_for', 'children')), fields=['id'], name='procedures_parents_waiting_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('root__isnull', True)), fields=['finished_at'], name='procedures_prune_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('finished_at__isnull', False)), fields=['finished_at', 'status'], name='procedures_finished_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(fields=['created_at', 'id'], name='procedures_created_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(fields=['status', 'created_at', 'id'], name='procedures_status_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(fields=['type_name', 'created_at', 'id'], name='procedures_type_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('status', 'waiting'), ('wake_at__isnull', False)), fields=['wake_at'], name='procedures_wake_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(fields=['queue', 'created_at', 'id'], name='procedures_queue_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('status__in', (django_procedures.policy.status.RunStatus['FAILED'], django_procedures.policy.status.RunStatus['ROLLED_BACK'], django_procedures.policy.status.RunStatus['CANCELLED']))), fields=['type_name', 'status', 'created_at', 'id'], name='procedures_failed_type_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(models.Q(('status', 'done'), _negated=True), models.Q(('error', ''), _negated=True)), fields=['created_at', 'id'], name='procedures_error_created_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('failure_can_retry', True), ('status', 'failed')), fields=['created_at', 'id'], name='procedures_retryable_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('schedule__isnull', False)), fields=['schedule', 'created_at', 'id'], name='procedures_schedule_idx'),
        ),
        migrations.AddIndex(
            model_name='procedurerun',
            index=models.Index(condition=models.Q(('rerun_of__isnull', False)), fields=['rerun_of'], name='procedures_rerun_of_idx'),
        ),
        migrations.AddConstraint(
            model_name='procedurerun',
            constraint=models.UniqueConstraint(condition=models.Q(('key__isnull', False)), fields=('key',), name='procedures_unique_key'),
        ),
        migrations.AddConstraint(
            model_name='procedurerun',
            constraint=models.UniqueConstraint(condition=models.Q(('schedule__isnull', False)), fields=('schedule', 'tick_at'), name='procedures_one_run_per_tick'),
        ),
        migrations.AddIndex(
            model_name='step',
            index=models.Index(fields=['procedure', 'index', 'attempt'], name='procedures_step_order_idx'),
        ),
        migrations.AddConstraint(
            model_name='step',
            constraint=models.UniqueConstraint(condition=models.Q(('status', django_procedures.policy.status.StepStatus['DONE'])), fields=('procedure', 'index'), name='procedures_step_done_once'),
        ),
        migrations.CreateModel(
            name='Event',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=100)),
                ('payload', models.JSONField(blank=True, null=True)),
                ('key', models.CharField(blank=True, max_length=255, null=True)),
                ('sent_at', models.DateTimeField()),
                ('sent_by', models.CharField(blank=True, max_length=255)),
                ('consumed_at', models.DateTimeField(blank=True, null=True)),
                ('consumed_step', models.PositiveIntegerField(blank=True, null=True)),
                ('consumed_by', models.CharField(blank=True, max_length=255)),
                ('procedure', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='django_procedures.procedurerun')),
            ],
            options={
                'ordering': ['procedure', 'id'],
                'indexes': [models.Index(fields=['procedure', 'id'], name='procedures_event_idx'), models.Index(condition=models.Q(('consumed_at__isnull', True)), fields=['procedure', 'id'], name='procedures_event_open_idx')],
                'constraints': [models.UniqueConstraint(condition=models.Q(('key__isnull', False)), fields=('procedure', 'key'), name='procedures_event_key')],
            },
        ),
        # PostgreSQL only (see above). Unapplied, the table's drop takes the index and the fillfactor with it.
        migrations.RunPython(notify_finished, no_notify_finished, elidable=False),
        migrations.RunPython(leave_room, migrations.RunPython.noop, elidable=False),
        migrations.RunPython(create_error_search_index, migrations.RunPython.noop, elidable=False),
    ]
