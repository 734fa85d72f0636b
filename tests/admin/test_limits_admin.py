"""The admin's Limits page: flow-control limits in use fleet-wide, read-only."""

import pytest
from django.urls import reverse

from django_procedures.store.claim import claim
from testproject.testapp.procedures import Limited
from tests.admin.helpers import client_for, staff
from tests.runs import page_text

pytestmark = pytest.mark.django_db


def test_the_limits_page_lists_limits_in_use_with_their_use():
    for _ in range(3):
        Limited.submit({"concurrency": [["crm-api", 2]], "rate": [["crm-rate", 100, 60]]}, queue="crm")
    claim("w", type_names=[Limited.type_name], limit=5, lease_seconds=30)
    client = client_for(staff("op", "view_limituse"))
    response = client.get(reverse("admin:django_procedures_limituse_changelist"))
    assert response.status_code == 200
    text = page_text(response)
    assert "crm-api" in text and "2 of 2 running" in text
    assert "crm-rate" in text and "per 60s" in text
    assert "crm" in text  # the queue its waiting procedure is in


def test_the_limits_page_is_read_only():
    client = client_for(staff("op", "view_limituse"))
    assert client.get(reverse("admin:django_procedures_limituse_add")).status_code == 403
