"""Chromium: the tree timeline on the procedure page and the dashboard's charts, read from the DOM.

Screenshots (artifacts/screenshots/15-*, 16-*) are the ones docs/operators-guide.md shows.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from django_procedures.models import ProcedureRun
from django_procedures.testing import drain
from testproject.testapp.procedures import Heartbeat, Leaf, Pipeline, Refuses, ThreeSteps
from tests.admin.helpers import VIEW, changelist_url, dashboard_url, page_url, staff
from tests.admin.test_browser import SCREENSHOTS, browser, open_page, pytestmark  # noqa: F401 - the fixture

pytestmark = [*pytestmark, pytest.mark.django_db(transaction=True)]


def run_pipeline() -> tuple[ProcedureRun, dict[str, ProcedureRun]]:
    """A Pipeline tree run to the end on a moving clock: its Flaky child fails twice and waits to retry."""
    handle = Pipeline.submit({"flaky": 2})
    t0 = timezone.now() + timedelta(seconds=1)
    for seconds in (0, 10, 30, 31):  # Flaky's retries come 10 s, then 20 s later
        drain(now=t0 + timedelta(seconds=seconds))
    root = ProcedureRun.objects.get(id=handle.id)
    assert root.status == "done"
    children = {c.type_name: c for c in ProcedureRun.objects.filter(parent_id=root.id)}
    return root, children


def test_the_tree_timeline_draws_each_member_with_linked_bars(browser, live_server):  # noqa: F811
    staff("operator", VIEW)
    _, children = run_pipeline()
    flaky = children["testapp.Flaky"]
    page = open_page(browser, live_server, "operator")
    page.goto(live_server.url + page_url(flaky.id))
    picture = page.locator("#proc-timeline-svg")
    picture.wait_for()

    labels = picture.locator("text.tl-label").all_text_contents()
    assert len(labels) == 4 and labels[0].startswith("testapp.Pipeline")
    failed = picture.locator("a:has(rect.tl-failed)")
    assert failed.count() == 3  # Flaky's two failed attempts, the Leaf's refusal
    hrefs = {failed.nth(i).get_attribute("href") for i in range(3)}
    assert hrefs == {page_url(flaky.id), page_url(children["testapp.Leaf"].id)}
    titles = picture.locator("rect.tl-failed > title").all_text_contents()
    assert any("attempt 2 · failed" in t and "flaky failure on attempt 2" in t for t in titles)
    assert picture.locator("rect.tl-retry").count() == 2
    assert "waiting for its children" in picture.locator("rect.tl-waiting > title").first.text_content()
    box = picture.bounding_box()
    assert box["width"] > 600 and box["height"] > 100  # drawn, not collapsed
    page.locator("#proc-timeline").screenshot(path=str(shot_path("15-tree-timeline")))

    # A bar is a link: the ThreeSteps child's last bar (drawn on top of its other two, all at one instant of the
    # test's clock) opens its page.
    page.locator("a:has(rect.tl-done[data-step='three'])").click()
    page.wait_for_url(f"**{page_url(children['testapp.ThreeSteps'].id)}")
    assert "testapp.ThreeSteps" in page.locator("h1").inner_text()


def seed_activity() -> None:
    """Procedures finished over the last day (more lately), a few failures, and unfinished ones in two queues."""
    now = timezone.now()
    for minutes, kind, status, took in [(2, ThreeSteps, "done", 0.4), (2, ThreeSteps, "done", 0.9),
                                        (3, Refuses, "failed", 0.1), (7, ThreeSteps, "done", 1.4),
                                        (12, Leaf, "done", 0.05), (12, Leaf, "done", 0.08),
                                        (25, ThreeSteps, "done", 2.0),
                                        (41, Refuses, "failed", 0.1), (55, Leaf, "done", 0.07),
                                        (90, ThreeSteps, "done", 3.1), (300, ThreeSteps, "done", 0.7),
                                        (600, Refuses, "failed", 0.2), (1200, Leaf, "done", 0.06)]:
        handle = kind.submit({})
        finished_at = now - timedelta(minutes=minutes)
        ProcedureRun._writer.filter(id=handle.id).update(
            status=status, started_at=finished_at - timedelta(seconds=took), finished_at=finished_at)
    for _ in range(3):
        ThreeSteps.submit({}, queue="emails")
    ThreeSteps.submit({}, queue="emails", run_after=now + timedelta(hours=1))
    Heartbeat.submit({}, queue="billing")


def test_the_dashboard_charts_link_each_bar_to_what_it_counts(browser, live_server):  # noqa: F811
    staff("operator", VIEW)
    seed_activity()
    page = open_page(browser, live_server, "operator")
    page.goto(live_server.url + dashboard_url())
    page.locator("#chart-hour").wait_for()

    hour_done = page.locator("#chart-hour rect.ch-done")
    hour_failed = page.locator("#chart-hour rect.ch-failed")
    assert hour_done.count() == 5 and hour_failed.count() == 2  # minutes with done ones; with failures
    assert "1 failed or rolled back" in hour_failed.first.locator("title").text_content()
    assert page.locator("#chart-day rect.ch-done").count() >= 4
    assert page.locator("#chart-day rect.ch-failed").count() == 3
    assert "7 done, 2 failed or rolled back" in page.locator("#dash-hour figcaption").inner_text()

    rows = page.locator("#chart-percentiles a.ch-row")
    assert [rows.nth(i).get_attribute("data-type") for i in range(rows.count())] == [
        "testapp.ThreeSteps", "testapp.Leaf"]
    assert "p50" in rows.first.locator("title").text_content()
    due = page.locator("#chart-depth rect.ch-due")
    assert due.count() == 2 and "queue emails: 3 due now" in due.first.locator("title").text_content()
    assert page.locator("#chart-depth rect.ch-later").count() == 1
    page.locator("#dash-charts").screenshot(path=str(shot_path("16-dashboard-charts")))

    # The failed column of the hour chart lists the failures of that minute.
    page.locator("#chart-hour a:has(rect.ch-failed)").first.click()
    page.wait_for_url("**status__exact=failed**")
    listed = page.locator("#result_list tbody tr")
    assert listed.count() == 1 and "testapp.Refuses" in listed.first.inner_text()
    assert changelist_url() in page.url


def shot_path(name: str) -> Path:
    return SCREENSHOTS / f"{name}.png"
