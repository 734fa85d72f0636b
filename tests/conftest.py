import django
import pytest
from django.db import connection
from django.test import override_settings


def pytest_report_header(config):
    """Say which database and Django version this run is on (``make test`` runs several legs)."""
    s = connection.settings_dict
    if connection.vendor == "postgresql":
        test_name = s["TEST"].get("NAME") or f"test_{s['NAME']}"
        where = f"PostgreSQL at {s['HOST']}:{s['PORT']}, test database {test_name}"
    else:
        where = f"{connection.display_name} (PostgreSQL-only tests are skipped)"
    return f"django-procedures: Django {django.get_version()} on {where}"


def pytest_collection_modifyitems(config, items):
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL=postgres://...)")
    for item in items:
        if "postgres" in item.keywords or "subprocess" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _procedure_registry():
    """Forget the procedure classes a test defined, so tests can run in any order (pytest-randomly)."""
    from django_procedures.testing import isolated_registry

    with isolated_registry():
        yield


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing():
    """The admin tests create users: Django's default hasher spends most of a second on each password."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture(autouse=True, scope="session")
def _pooled_connections_closed_at_the_end(request):
    """Under ``make test-pgbouncer`` PgBouncer keeps server connections to the test database open after the
    workers are gone; they are closed before pytest-django drops it (DROP DATABASE refuses while they last)."""
    from tests.runtime.processes import pooler_url

    if pooler_url() is None or connection.vendor != "postgresql":
        yield
        return
    request.getfixturevalue("django_db_setup")  # so that this fixture's end comes before the database's
    yield
    with request.getfixturevalue("django_db_blocker").unblock(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")


@pytest.fixture
def analyze():
    """``analyze()`` runs ANALYZE on the procedures table, for a test of the plans PostgreSQL chooses.

    ANALYZE writes the table's row count to ``pg_class`` in place, so it outlives the test's rollback and
    changes the plans of the tests after it (an index test that passed alone failed after two others that
    analyzed). At teardown, on PostgreSQL, the table is emptied inside the test's transaction and analyzed again.
    """
    from django_procedures.models import ProcedureRun

    table = ProcedureRun._meta.db_table
    used = []

    def run() -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {table}")
        used.append(table)

    yield run
    if used and connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table}")
            cursor.execute(f"ANALYZE {table}")
