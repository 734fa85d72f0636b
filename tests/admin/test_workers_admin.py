"""The workers list: alive / gone / stopped, what each runs now, read-only."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_procedures.models import Worker
from django_procedures.policy.workers import StopReason
from django_procedures.store import workers
from django_procedures.store.claim import claim
from testproject.testapp.procedures import ThreeSteps
from tests.admin.helpers import client_for, staff
from tests.runs import page_text

pytestmark = pytest.mark.django_db


def start(name: str) -> int:
    return workers.register(worker_id=name, hostname="app-1", pid=4242, version="0.1.0", queues=["emails"],
                            concurrency=4, lease_seconds=30)


def test_workers_list_shows_state_and_running_work():
    client = client_for(staff("op", "view_worker", "view_procedurerun"))
    start("alive@app-1")
    gone = start("gone@app-1")
    stopped = start("stopped@app-1")
    Worker._writer.filter(id=gone).update(alive_until=timezone.now() - timedelta(seconds=1))
    workers.stop(stopped, StopReason.BURST)
    for _ in range(5):
        ThreeSteps.submit()
    claim("alive@app-1", type_names=[ThreeSteps.type_name], limit=4, lease_seconds=30)
    url = reverse("admin:django_procedures_worker_changelist")

    with CaptureQueriesContext(connection) as captured:
        html = client.get(url).content.decode()
    assert len(captured) < 10  # one query for what every listed worker runs, not one per worker
    rows = {m.group(1): page_text(m.group(0)) for m in re.finditer(r'<tr[^>]*>.*?<a[^>]*>([^<]+@app-1)</a>.*?</tr>',
                                                                   html, re.S)}
    assert "alive" in rows["alive@app-1"] and "ThreeSteps · one" in rows["alive@app-1"] and "(+1)" in rows[
        "alive@app-1"]
    assert " gone " in rows["gone@app-1"]
    assert "stopped" in rows["stopped@app-1"] and "drained (--burst)" in rows["stopped@app-1"]

    only_gone = page_text(client.get(url + "?state=gone").content.decode())
    assert "gone@app-1" in only_gone and "alive@app-1" not in only_gone
    assert client.get(reverse("admin:django_procedures_worker_add")).status_code == 403
