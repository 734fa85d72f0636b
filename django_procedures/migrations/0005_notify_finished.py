"""On PostgreSQL, an awaited procedure reaching a final status NOTIFYs its own channel, for ``ProcedureHandle.wait()``.

A trigger rather than a statement in each final transition: it costs no round trip, and no final path
(a step, the sweep, a cancel, a deadlock victim) can forget it. Only rows marked ``awaited`` (by a
``wait()`` that listens) notify: the ``WHEN`` clause is checked in the executor without calling the
function, and a NOTIFY makes its transaction take PostgreSQL's notification lock at commit, which
would serialise the commits of every completion. The channel is ``django_procedures_finished_<id in
hex>``; the payload is the final status. Nothing happens on SQLite.
"""

from django.db import migrations, models

FORWARDS = """
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

BACKWARDS = """
DROP TRIGGER IF EXISTS django_procedures_notify_finished ON django_procedures_procedurerun;
DROP FUNCTION IF EXISTS django_procedures_notify_finished();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARDS)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARDS)


class Migration(migrations.Migration):

    dependencies = [
        ("django_procedures", "0004_state_json_keeps_floats"),
    ]

    operations = [
        migrations.AddField(
            model_name="procedurerun",
            name="awaited",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
