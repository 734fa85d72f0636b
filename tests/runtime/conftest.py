import pytest

from tests.runtime.processes import Workers

# The helpers of trees.py assert, as they did inside a test module: keep pytest's detailed messages for them.
pytest.register_assert_rewrite("tests.runtime.trees")


@pytest.fixture
def workers(transactional_db, tmp_path):
    """Worker subprocesses of this test: killed before the test database is flushed; logs printed."""
    pool = Workers(tmp_path)
    yield pool
    pool.close()
    print(pool.describe())
