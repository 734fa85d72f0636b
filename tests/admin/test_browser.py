"""The operator's admin in a real browser: find a failed procedure, open its tree, retry it; pause and trigger
a schedule.

Playwright for Python drives Debian's Chromium (``/usr/bin/chromium``; never a
downloaded browser) against pytest-django's live server. PostgreSQL only.
Screenshots are saved under ``artifacts/screenshots/`` as test artifacts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from django_procedures import register_schedule, tick
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store import schedules
from django_procedures.store.claim import claim
from django_procedures.testing import drain
from testproject.testapp.procedures import Flaky, Heartbeat, Leaf, Parent, Refuses, ThreeSteps, TolerantParent
from tests.admin.helpers import (
    CANCEL,
    RETRY,
    SCHEDULE_OPERATOR,
    VIEW,
    changelist_url,
    dashboard_url,
    page_url,
    retry_url,
    schedules_url,
    staff,
)

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]

try:
    from playwright.sync_api import Page, sync_playwright
except ImportError:  # pragma: no cover - depends on the environment
    sync_playwright = None

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.browser,
    pytest.mark.skipif(sync_playwright is None, reason="playwright is not installed (pip install playwright; "
                                                       "never 'playwright install': Debian's chromium is used)"),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install chromium)"),
]


@pytest.fixture
def browser(monkeypatch) -> Iterator[Any]:
    # Playwright's sync API runs an event loop in this thread; the ORM calls of the test are still synchronous.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            yield browser
        finally:
            browser.close()
            # Under Playwright's greenlets the test's ORM calls get a connection of their own (Django keys
            # connections by context); close it, or the test database cannot be dropped at the end.
            connections.close_all()


def open_page(browser, live_server, username: str, width: int = 1440) -> Page:
    """A new browser page, logged in through the admin's login form."""
    page = browser.new_page(viewport={"width": width, "height": 860})
    page.set_default_timeout(60_000)  # a loaded machine: a slow page is no failure
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")
    # More room for the list: collapse the admin's navigation sidebar (it remembers that in localStorage).
    page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    return page


def shot(page: Page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def seed_failures() -> ProcedureRun:
    """Some history, and a tree whose second leaf failed while the other two still run: its parent's
    ``on_child_failed`` handled the failure and it waits for them (so the leaf may be retried)."""
    ThreeSteps.submit({"tenant": "acme"})
    Refuses.submit({"tenant": "globex"})
    Flaky.submit({"fail_times": 2})
    drain()
    TolerantParent.submit({"fanout": 3, "failing": [1]})
    (parent,) = claim("w", type_names=[TolerantParent.type_name], lease_seconds=600)
    execute(RunningClaim(parent))
    leaves = {c.state["n"]: c for c in claim("w", type_names=[Leaf.type_name], limit=3, lease_seconds=600)}
    execute(RunningClaim(leaves[1]))
    (parent,) = claim("w", type_names=[TolerantParent.type_name], lease_seconds=600)
    execute(RunningClaim(parent))
    ThreeSteps.submit(queue="emails")
    return ProcedureRun.objects.get(id=leaves[1].id)


def test_an_operator_finds_a_failed_procedure_opens_its_tree_and_retries_it(browser, live_server):
    staff("operator", VIEW, RETRY, CANCEL)
    leaf = seed_failures()
    page = open_page(browser, live_server, "operator")

    page.goto(live_server.url + changelist_url())
    shot(page, "01-procedures-list")
    page.click("#changelist-filter a[href*='status__exact=failed']")
    page.wait_for_url("**status__exact=failed**")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 2  # the leaf and the Refuses
    shot(page, "02-failed-procedures")
    page.locator("#result_list tbody tr", has_text="testapp.Leaf").locator("th a").click()

    page.wait_for_selector("#proc-tree")
    tree = page.locator("#proc-tree").inner_text()
    assert "testapp.TolerantParent" in tree and tree.count("testapp.Leaf") == 3
    assert page.locator("#proc-status").inner_text() == "failed"
    assert "NonRetryable: leaf 1 refuses" in page.locator("#proc-error").inner_text()
    assert page.locator(".breadcrumbs a", has_text="testapp.TolerantParent").count() == 1
    shot(page, "03-procedure-page")

    page.click("#proc-retry")
    page.wait_for_selector("#proc-plan")
    plan = page.locator("#proc-plan").inner_text()
    assert "failed → ready" in plan and f"its parent testapp.TolerantParent {leaf.parent_id} waits for it again" in plan
    shot(page, "04-confirm-retry")
    page.click("#proc-confirm")

    page.wait_for_selector(".messagelist")
    assert "Retried 1 procedure; it is ready again." in page.locator(".messagelist").inner_text()
    assert page.locator("#proc-status").inner_text() == "ready"
    shot(page, "05-retried")
    assert ProcedureRun.objects.get(id=leaf.id).status == "ready"


def test_a_viewer_cannot_retry(browser, live_server):
    staff("viewer", VIEW)
    leaf = seed_failures()
    page = open_page(browser, live_server, "viewer")

    page.goto(live_server.url + changelist_url("status__exact=failed"))
    options = page.locator("select[name=action] option").all_inner_texts() if page.locator(
        "select[name=action]").count() else []
    assert not [o for o in options if "Retry" in o or "Cancel" in o]
    page.goto(live_server.url + page_url(leaf.id))
    page.wait_for_selector("#proc-tree")
    assert page.locator("#proc-retry").count() == 0 and page.locator("#proc-cancel").count() == 0
    shot(page, "06-viewer-page")

    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    headers = {"Referer": live_server.url + page_url(leaf.id)}
    forged = page.request.post(live_server.url + retry_url(leaf.id), headers=headers,
                               form={"csrfmiddlewaretoken": token, "post": "yes"})
    assert forged.status == 403
    forged_action = page.request.post(live_server.url + changelist_url(), headers=headers, form={
        "csrfmiddlewaretoken": token, "action": "retry_selected", "_selected_action": str(leaf.id),
        "index": "0", "post": "yes"})
    assert forged_action.status in (200, 302)
    assert ProcedureRun.objects.get(id=leaf.id).status == "failed"


def test_a_running_tree_says_why_each_member_is_not_running(browser, live_server):
    staff("operator", VIEW, RETRY, CANCEL)
    Flaky.submit({"fail_times": 2})
    drain()
    parent = Parent.submit({"fanout": 3})
    (spawning,) = claim("worker-1@app-1", type_names=[Parent.type_name], limit=1, lease_seconds=3600)
    execute(RunningClaim(spawning))
    claim("worker-2@app-2", type_names=[Leaf.type_name], limit=1, lease_seconds=3600)
    page = open_page(browser, live_server, "operator")

    page.goto(live_server.url + page_url(parent.id))
    page.wait_for_selector("#proc-tree")
    reasons = page.locator("#proc-tree .proc-why").all_inner_texts()
    assert reasons[0] == "waiting for children: 3 left"
    assert any(r.startswith("running, leased by worker worker-2@app-2; last heartbeat") for r in reasons)
    assert sum("waiting for a worker of its queue" in r for r in reasons) == 2
    shot(page, "07-tree-reasons")

    page.goto(live_server.url + dashboard_url())
    page.wait_for_selector("#dash-workers")
    assert "worker-2@app-2" in page.locator("#dash-workers").inner_text()
    shot(page, "08-dashboard")


def seed_schedules() -> Schedule:
    """A few schedules with some history; returns the one the operator works on."""
    sync, _ = register_schedule("crm-sync-contacts", Heartbeat, mode="fixed_rate_overlap", max_concurrency=3,
                                period=timedelta(minutes=5), missed="coalesce_latest")
    nightly, _ = register_schedule("nightly-report", Heartbeat, cron="0 3 * * *", timezone="Europe/Berlin",
                                   missed="catch_up", max_pending=2)
    register_schedule("cleanup-after-each", Heartbeat, mode="fixed_delay", period=timedelta(minutes=10))
    invoices, _ = register_schedule("billing-retry-invoices", Refuses, period=timedelta(hours=1))
    schedules.pause(invoices, reason="billing API maintenance until 06:00")
    tick()
    drain()
    Schedule._writer.filter(id=sync.id).update(runs=71, skips=2, overlaps=5, last_drift_ms=840)
    Schedule._writer.filter(id=invoices.id).update(runs=3, failures=4, last_drift_ms=1_250,
                                                   last_tick_at=timezone.now() - timedelta(hours=2))
    return nightly


def test_an_operator_pauses_and_triggers_a_schedule(browser, live_server):
    staff("operator", VIEW, *SCHEDULE_OPERATOR)
    nightly = seed_schedules()
    page = open_page(browser, live_server, "operator", width=1600)  # the schedules list has many columns

    page.goto(live_server.url + schedules_url())
    row = page.locator("#result_list tbody tr", has_text="nightly-report")
    assert "cron 0 3 * * *\nEurope/Berlin" in row.inner_text() and "enabled" in row.inner_text()
    assert "billing API maintenance" in page.locator("#result_list tbody tr", has_text="billing-retry").inner_text()
    shot(page, "09-schedules-list")
    row.locator("th a").click()

    page.wait_for_selector("#sched-buttons")
    page.click("#sched-pause")
    page.wait_for_selector("#proc-plan")
    assert "enabled → paused" in page.locator("#proc-plan").inner_text()
    page.fill("#sched-reason", "report database is being migrated")
    shot(page, "10-confirm-pause")
    page.click("#proc-confirm")
    page.wait_for_selector(".messagelist")
    assert "Paused 1 schedule." in page.locator(".messagelist").inner_text()
    assert "report database is being migrated" in page.locator("#sched-paused").inner_text()
    assert page.locator("#sched-trigger").count() == 0  # a paused schedule is not triggered
    assert not Schedule.objects.get(id=nightly.id).enabled

    page.click("#sched-resume")
    page.click("#proc-confirm")
    page.wait_for_selector("#sched-trigger")
    page.click("#sched-trigger")
    page.wait_for_selector("#proc-plan")
    assert "a tick now: starts a run" in page.locator("#proc-plan").inner_text()
    page.click("#proc-confirm")
    page.wait_for_selector(".messagelist")
    assert "Triggered 1 schedule: 1 run started" in page.locator(".messagelist").inner_text()
    assert page.locator("#sched-runs tbody tr").count() == 1
    assert "ready" in page.locator("#sched-runs tbody tr").inner_text()
    shot(page, "11-schedule-triggered")
    assert ProcedureRun.objects.filter(schedule=nightly).count() == 1

    page.click("#sched-runs-tool")
    page.wait_for_url("**schedule__id__exact=**")
    assert page.locator("#result_list tbody tr").count() == 1
    assert "testapp.Heartbeat" in page.locator("#result_list tbody tr").inner_text()

    page.goto(live_server.url + dashboard_url())
    page.wait_for_selector("#dash-schedules")
    assert "billing-retry-invoices" in page.locator("#dash-paused").inner_text()
    page.locator("#dash-schedules").scroll_into_view_if_needed()
    shot(page, "12-dashboard-schedules")
