"""Fixtures of the task tests: the runtime tests' worker processes and the admin tests' operator."""

from tests.admin.conftest import operator, operator_client  # noqa: F401
from tests.runtime.conftest import workers  # noqa: F401
