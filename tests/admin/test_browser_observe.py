"""Chromium: the workers list, progress bars, and the procedures list fitting a 1440 px screen."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_procedures.models import Worker
from django_procedures.policy.workers import StopReason
from django_procedures.runtime.executor import RunningClaim, execute
from django_procedures.store import workers
from django_procedures.store.claim import claim
from django_procedures.testing import drain
from testproject.testapp.procedures import Leaf, Parent, Refuses, Reports, ThreeSteps
from tests.admin.helpers import CANCEL, RETRY, VIEW, changelist_url, page_url, staff
from tests.admin.test_browser import browser, open_page, pytestmark, shot  # noqa: F401 - the fixture and marks

pytestmark = [*pytestmark, pytest.mark.django_db(transaction=True)]


def test_the_list_fits_1440_px_with_progress_and_the_last_error(browser, live_server):  # noqa: F811
    staff("operator", VIEW, RETRY, CANCEL)
    Refuses.submit({"tenant": "globex"})
    Reports.submit({"reports": [[40, 100, "rows copied"]]})
    ThreeSteps.submit({})
    drain()
    parent = Parent.submit({"fanout": 3})
    (spawning,) = claim("worker-1@app-1", type_names=[Parent.type_name], limit=1, lease_seconds=30)
    execute(RunningClaim(spawning))
    (leaf,) = claim("worker-1@app-1", type_names=[Leaf.type_name], limit=1, lease_seconds=30)
    execute(RunningClaim(leaf))
    page = open_page(browser, live_server, "operator")
    page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'true')")  # as a newcomer sees it

    page.goto(live_server.url + changelist_url())
    page.wait_for_selector("#result_list")
    shot(page, "13-list-progress-sidebar")
    error = page.locator("#result_list td.field-last_error .proc-error").first
    box, room = error.bounding_box(), page.locator("#changelist-form").bounding_box()
    # The error is inside the list's visible area (not scrolled out of it), and wide enough to read.
    assert box["x"] + box["width"] <= room["x"] + room["width"] + 1 and box["width"] >= 100, (box, room)
    assert page.locator("#result_list progress").count() >= 2  # the report and the waiting parent
    assert "1/3 children done" in page.locator("#result_list").inner_text()
    shot(page, "13-list-progress")

    page.goto(live_server.url + page_url(parent.id))
    page.wait_for_selector("#proc-children")
    assert "1/3 children done" in page.locator("#proc-children").inner_text()


def test_the_workers_list(browser, live_server):  # noqa: F811
    staff("operator", VIEW, "view_worker")
    workers.register(worker_id="app-1:4242:1a2b3c", hostname="app-1", pid=4242, version="0.1.0",
                     queues=None, concurrency=4, lease_seconds=30)
    gone = workers.register(worker_id="app-2:977:9f8e7d", hostname="app-2", pid=977, version="0.1.0",
                            queues=["emails"], concurrency=2, lease_seconds=30)
    Worker._writer.filter(id=gone).update(alive_until=timezone.now() - timedelta(minutes=3))
    stopped = workers.register(worker_id="app-1:4100:aa11bb", hostname="app-1", pid=4100, version="0.1.0",
                               queues=None, concurrency=4, lease_seconds=30)
    workers.stop(stopped, StopReason.SIGTERM)
    Reports.submit({})
    claim("app-1:4242:1a2b3c", type_names=[Reports.type_name], limit=1, lease_seconds=30)
    page = open_page(browser, live_server, "operator")

    page.goto(live_server.url + "/admin/django_procedures/worker/")
    page.wait_for_selector("#result_list")
    text = page.locator("#result_list").inner_text()
    assert "alive" in text and "gone" in text and "stopped" in text and "Reports · count" in text
    shot(page, "14-workers")
