"""Progress in the admin: a bar in the list and on the page; a waiting parent's children done."""

import re

import pytest

from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store.claim import claim
from django_procedures.testing import drain
from testproject.testapp.procedures import Leaf, Parent, Reports
from tests.admin.helpers import changelist_url, page_url
from tests.runs import page_text

pytestmark = pytest.mark.django_db


def run_one(type_name: str) -> None:
    (c,) = claim("w", type_names=[type_name], limit=1, lease_seconds=30)
    execute(RunningClaim(c))


def test_a_report_shows_as_a_bar_in_the_list_and_on_the_page(operator_client):
    handle = Reports.submit({"reports": [[30, 120, "rows copied"]]})
    unknown = Reports.submit({"reports": [[7, None, "pages"]]})
    drain()
    html = operator_client.get(changelist_url()).content.decode()
    assert '<progress value="0.2500" max="1">25%</progress>' in html
    assert "30/120 · rows copied" in page_text(html)
    assert "7 done · pages" in page_text(html)  # no total: no bar, the count alone

    page = operator_client.get(page_url(handle.id)).content.decode()
    cell = re.search(r'<td id="proc-progress">(.*?)</td>', page, re.S).group(1)
    assert "<progress" in cell and "30/120 · rows copied" in page_text(cell) and "reported" in cell
    assert 'id="proc-progress"' in operator_client.get(page_url(unknown.id)).content.decode()


def test_a_waiting_parent_shows_how_many_children_are_done(operator_client):
    parent = Parent.submit({"fanout": 3})
    run_one(Parent.type_name)  # spawns three leaves and waits
    run_one(Leaf.type_name)
    assert parent.refresh().status == "waiting"

    listed = page_text(operator_client.get(changelist_url()).content.decode())
    assert "1/3 children done" in listed
    page = operator_client.get(page_url(parent.id)).content.decode()
    assert "1/3 children done" in page_text(re.search(r'<td id="proc-children">(.*?)</td>', page, re.S).group(1))


def test_nothing_is_shown_without_a_report(operator_client):
    Reports.submit({})
    drain()
    html = operator_client.get(changelist_url()).content.decode()
    assert "<progress" not in html
