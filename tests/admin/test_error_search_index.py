"""The admin's search by error words reads a trigram index (PostgreSQL with pg_trgm), and the migration that
makes it falls back to no index where the extension cannot be created."""

from __future__ import annotations

import importlib

import pytest
from django.contrib.admin.sites import site
from django.db import connection
from django.test import RequestFactory
from django.utils import timezone

from django_procedures.models import ProcedureRun
from tests.plans import plan_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

migration = importlib.import_module("django_procedures.migrations.0001_initial")


def _trgm_available() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")
        return cursor.fetchone() is not None


def _index_exists() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [migration.INDEX])
        return cursor.fetchone() is not None


def _search_plan(term: str) -> str:
    admin = site._registry[ProcedureRun]
    queryset, _ = admin.get_search_results(RequestFactory().get("/"), ProcedureRun.objects.all(), term)
    return plan_of(queryset.order_by("-created_at", "-id")[:50], "seqscan")


def _needs_trgm() -> None:
    if not _trgm_available():
        pytest.skip("pg_trgm is not installed on this server")


def test_the_migrations_made_the_trigram_index():
    _needs_trgm()
    assert _index_exists()


def test_a_search_for_error_words_reads_the_trigram_index(analyze):
    _needs_trgm()
    now = timezone.now()
    ProcedureRun._writer.bulk_create(
        ProcedureRun(type_name="billing.Charge", status="failed", run_at=now, error=f"TimeoutError: upstream {i}")
        for i in range(20_000))  # enough that reading them all costs more than the index
    analyze()
    assert migration.INDEX in _search_plan("zebra crossing")


def test_where_the_extension_cannot_be_created_the_migration_makes_no_index(monkeypatch):
    from django.apps import apps

    monkeypatch.setattr(migration, "EXTENSION_SQL", "CREATE EXTENSION no_such_extension_for_procedures")
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX IF EXISTS {migration.INDEX}")  # rolled back with the test's transaction
    with connection.schema_editor(atomic=False) as editor:
        assert migration.create_error_search_index(apps, editor) is False
    assert not _index_exists()
    assert ProcedureRun.objects.count() == 0  # the connection is still usable: the failure was rolled back


def _index_definition() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [migration.INDEX])
        row = cursor.fetchone()
    return row[0] if row else ""


def test_the_index_holds_only_procedures_with_an_error():
    # A procedure that succeeds at its first attempt (ready, then running, with no error) never writes it.
    _needs_trgm()
    assert "error <> ''::text" in _index_definition()


def test_a_search_for_error_words_never_matches_a_procedure_without_an_error():
    now = timezone.now()
    ProcedureRun._writer.bulk_create([
        ProcedureRun(type_name="billing.Charge", status="failed", run_at=now, error="TimeoutError: upstream"),
        ProcedureRun(type_name="billing.Charge", status="ready", run_at=now, error=""),
    ])
    admin = site._registry[ProcedureRun]
    found, _ = admin.get_search_results(RequestFactory().get("/"), ProcedureRun.objects.all(), "upstream")
    assert [r.error for r in found] == ["TimeoutError: upstream"]
