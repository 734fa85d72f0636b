import pytest

# The simulator asserts the slot bound as it walks, as it did inside a test module: keep pytest's detailed messages.
pytest.register_assert_rewrite("tests.policy.schedule_sim")
