"""Check W005: a procedure's step list changed while its version did not, seen from the runs not final."""

import pytest
from django.db import connection

from django_procedures import Procedure, step
from django_procedures.checks import check_step_lists
from django_procedures.models import ProcedureRun
from django_procedures.testing import isolated_registry

pytestmark = pytest.mark.django_db


def ids(found):
    return [m.id for m in found]


def define(*names, version=1):
    body = {"type_name": "checks.Report", "version": version, **{n: step(lambda self, ctx: None) for n in names}}
    return type("Report", (Procedure,), body)


def test_a_step_added_before_where_runs_stand_warns_until_the_version_is_raised():
    with isolated_registry():
        old = define("fetch", "upload")
        old.submit()
        handle = old.submit()
        ProcedureRun._writer.filter(id=handle.id).update(step=1, step_name="upload")
        assert check_step_lists(databases=["default"]) == []
    with isolated_registry():
        new = define("fetch", "transform", "upload")
        (warning,) = check_step_lists(databases=["default"])
        assert warning.id == "django_procedures.W005" and warning.obj is new
        assert "checks.Report has unfinished runs of version 1" in warning.msg
        assert "'upload' at position 1" in warning.msg and "without raising its version" in warning.msg
        assert "version = 2" in warning.hint and "docs/changing-procedures.md" in warning.hint
        assert check_step_lists() == []  # plain `check` and runserver: no database checks
    with isolated_registry():
        define("fetch", "transform", "upload", version=2)
        assert check_step_lists(databases=["default"]) == []


def test_final_runs_do_not_count():
    with isolated_registry():
        old = define("fetch", "upload")
        handle = old.submit()
        ProcedureRun._writer.filter(id=handle.id).update(status="done", step=2, step_name="")
    define("upload")
    assert check_step_lists(databases=["default"]) == []


def test_a_database_not_migrated_gives_no_warning_and_no_error():
    define("fetch")
    with connection.cursor() as cursor:  # rolled back with the test
        cursor.execute("ALTER TABLE django_procedures_procedurerun RENAME TO procedures_run_elsewhere")
    assert check_step_lists(databases=["default"]) == []
    with connection.cursor() as cursor:  # the test's transaction is still usable
        cursor.execute("SELECT 1")
