import pytest

from tests.runtime.processes import Workers


@pytest.fixture
def workers(transactional_db, tmp_path):
    """Worker subprocesses of this test: killed before the test database is flushed; logs printed."""
    pool = Workers(tmp_path)
    yield pool
    pool.close()
    print(pool.describe())
