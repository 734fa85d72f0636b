"""Fixtures of the admin tests: an operator (view, retry, cancel) and a viewer (view only)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.admin.helpers import CANCEL, RETRY, VIEW, client_for, staff


@pytest.fixture
def operator(db) -> User:
    """Staff with view, retry and cancel permissions (not a superuser)."""
    return staff("operator", VIEW, RETRY, CANCEL)


@pytest.fixture
def viewer(db) -> User:
    """Staff who may only look."""
    return staff("viewer", VIEW)


@pytest.fixture
def operator_client(operator) -> Client:
    return client_for(operator)


@pytest.fixture
def viewer_client(viewer) -> Client:
    return client_for(viewer)
