"""Whatever the query string holds, the lists answer with a page, a redirect or a 400, never a 500."""

import re
from html import unescape

import pytest

from testproject.testapp.procedures import Heartbeat, ThreeSteps
from tests.admin.helpers import VIEW, VIEW_SCHEDULE, changelist_url, client_for, schedules_url, staff
from tests.admin.test_schedule_admin import make

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(db):
    return client_for(staff("viewer", VIEW, VIEW_SCHEDULE))


def warnings_of(response) -> list[str]:
    return [unescape(m) for m in re.findall(r'<li class="warning">(.*?)</li>', response.content.decode(), re.S)]


@pytest.mark.parametrize(("url", "query", "kept"), [
    (changelist_url, "type_name=%00", ""),
    (changelist_url, "queue=%00", ""),
    (changelist_url, "queue=a%00b&status__exact=failed", "status__exact=failed"),
    (changelist_url, "status__exact=%00", ""),
    (changelist_url, "q=%00", ""),
    (changelist_url, "%00=1", ""),
    (schedules_url, "q=%00", ""),
    (schedules_url, "name=%00", ""),
    (schedules_url, "mode__exact=%00&enabled__exact=1", "enabled__exact=1"),
])
def test_a_nul_in_a_filter_or_search_is_dropped_with_a_message(viewer, url, query, kept):
    ThreeSteps.submit()
    make("beat", Heartbeat)
    response = viewer.get(url(query))
    assert response.status_code == 302 and response["Location"] == url(kept)
    page = viewer.get(response["Location"])
    assert page.status_code == 200
    assert warnings_of(page)[0].startswith("A filter or search cannot contain a NUL character; it was dropped:")


@pytest.mark.parametrize("query", [
    "type_name=" + "x" * 5000, "queue=%E2%80%94", "created_at__year=abc", "created_at__year=2030&created_at__month=13",
    "created_at__month=abc", "schedule__id__exact=abc", "schedule__id__exact=99999999999999999999", "p=abc", "o=abc",
    "retryable=maybe", "roots=maybe", "q=" + "x" * 5000, "q=%F0%9F%94%A5",
])
def test_odd_values_never_answer_500(viewer, query):
    ThreeSteps.submit()
    assert viewer.get(changelist_url(query)).status_code in (200, 302, 400)
    assert viewer.get(schedules_url(query)).status_code in (200, 302, 400)
