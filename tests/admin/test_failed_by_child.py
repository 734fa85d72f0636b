"""A parent failed by a child: the page says "child failed", links the child, and warns before a retry."""

import re

import pytest

from django_procedures.models import ProcedureRun
from django_procedures.testing import drain
from testproject.testapp.procedures import Leaf, PlainParent, ThreeSteps
from tests.admin.helpers import page_url

pytestmark = pytest.mark.django_db


def test_the_error_names_the_failed_child_not_a_step_that_never_ran(operator_client):
    parent = PlainParent.submit({"fanout": 2, "failing": [1]})
    drain()
    assert parent.refresh().status == "failed"
    child = ProcedureRun.objects.get(parent_id=parent.id, status="failed")
    assert child.type_name == Leaf.type_name

    html = operator_client.get(page_url(parent.id)).content.decode()
    heading = re.search(r'<div class="proc-section" id="proc-error"><h2>(.*?)</h2>', html, re.S).group(1)
    assert "in step report" not in heading
    assert f"child {Leaf.type_name} {str(child.id)[-8:]} failed" in heading
    assert page_url(child.id) in heading
    warning = re.search(r'<p class="proc-error" id="proc-retry-warning">(.*?)</p>', html, re.S).group(1)
    assert "A retry retries 1 failed child and waits for it, then resumes after its suspension." in warning
    assert page_url(child.id) in warning


def test_an_ordinary_failure_still_names_its_step(operator_client):
    handle = ThreeSteps.submit({})
    drain()
    ProcedureRun._writer.filter(id=handle.id).update(status="failed", error="RuntimeError: boom", failed_step="two",
                                                     failure_can_retry=True)
    html = operator_client.get(page_url(handle.id)).content.decode()
    assert "in step two" in html and 'id="proc-retry-warning"' not in html
