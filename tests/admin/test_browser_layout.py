"""Chromium at 1440 x 900: what an operator needs on the procedures and schedules lists is on screen.

Both lists are loaded with the navigation sidebar open (as a newcomer sees them) and with long values (type
names, errors, pause reasons); every named column must end inside the viewport, without scrolling sideways.
Screenshots: artifacts/screenshots/17-*.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_procedures import register_schedule
from django_procedures.models import Schedule
from django_procedures.store import schedules
from django_procedures.testing import drain
from testproject.testapp.procedures import Flaky, Heartbeat, Refuses, Reports, ThreeSteps
from tests.admin.helpers import CANCEL, RETRY, SCHEDULE_OPERATOR, VIEW, changelist_url, schedules_url, staff
from tests.admin.test_browser import browser, open_page, pytestmark, shot  # noqa: F401 - the fixture and marks

pytestmark = [*pytestmark, pytest.mark.django_db(transaction=True)]
WIDTH, HEIGHT = 1440, 900


def right_edges(page, columns: list[str]) -> dict[str, float]:
    """The right edge (px) of each named column's header cell, and ``visible``: where the list is cut (the
    viewport, or the scrolling box the table sits in)."""
    box = page.locator("#changelist-form .results").bounding_box()
    edges = {"visible": min(WIDTH, box["x"] + box["width"])}
    for column in columns:
        box = page.locator(f"#result_list thead th.column-{column}").bounding_box()
        assert box is not None, f"no column {column}"
        edges[column] = box["x"] + box["width"]
    return edges


def test_both_lists_show_every_column_an_operator_needs_at_1440_px(browser, live_server):  # noqa: F811
    staff("operator", VIEW, RETRY, CANCEL, *SCHEDULE_OPERATOR)
    Refuses.submit({"tenant": "globex-international-holdings"})
    Reports.submit({"reports": [[40, 100, "rows copied from the warehouse"]]})
    Flaky.submit({"fail_times": 1})
    ThreeSteps.submit({}, queue="emails")
    drain()
    for name in ("nightly-warehouse-export", "hourly-invoice-reminders", "every-minute-heartbeat"):
        register_schedule(name, Heartbeat, period=timedelta(minutes=5))
    Schedule._writer.filter(name="nightly-warehouse-export").update(
        runs=1234, skips=56, overlaps=7, failures=89, last_drift_ms=123_456,
        last_error="no procedure class is registered as 'gone.Removed': deploy it, or delete the schedule")
    schedules.pause("hourly-invoice-reminders", reason="the invoicing API is down until the provider fixes it")

    page = open_page(browser, live_server, "operator")
    page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
    page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'true')")

    page.goto(live_server.url + changelist_url())
    page.wait_for_selector("#result_list")
    shot(page, "17-procedures-list-1440")
    edges = right_edges(page, ["last_error", "attempts", "age", "duration"])
    assert all(edge <= edges["visible"] + 1 for edge in edges.values()), edges
    error = page.locator("#result_list td.field-last_error .proc-error").first
    assert error.bounding_box()["width"] >= 200  # some 30 characters of the error (it had room for 20)
    assert "flaky failure on attempt 1" in error.get_attribute("title")  # the whole text on hover

    page.goto(live_server.url + schedules_url())
    page.wait_for_selector("#result_list")
    shot(page, "17-schedules-list-1440")
    edges = right_edges(page, ["failures", "last_drift", "status"])
    assert all(edge <= edges["visible"] + 1 for edge in edges.values()), edges
    reason = page.locator("#result_list td.field-status .proc-reason").first
    box = reason.bounding_box()
    assert box["x"] + box["width"] <= WIDTH and box["width"] >= 100, box
    assert "until the provider fixes it" in reason.get_attribute("title")
