"""The tree timeline on the procedure page: bars per step attempt, failed ones marked, gaps, links, the cap."""

import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_procedures.admin import reads, svg, tree_timeline
from django_procedures.models import ProcedureRun
from django_procedures.testing import drain
from testproject.testapp.procedures import Compensated, Flaky, Parent, TolerantParent
from tests.admin.helpers import changelist_url, page_url

pytestmark = pytest.mark.django_db
NS = {"s": "http://www.w3.org/2000/svg"}


def picture(client, pid) -> ET.Element:
    response = client.get(page_url(pid))
    assert response.status_code == 200
    return ET.fromstring(str(response.context["timeline"].svg))


def bars(root: ET.Element, kind: str) -> list[tuple[str, str]]:
    """``(link, title)`` of each bar of ``kind`` (an attempt status)."""
    found = []
    for link in root.iterfind("s:a", NS):
        for rect in link.iterfind(f"s:rect[@class='tl-bar tl-{kind}']", NS):
            found.append((link.get("href"), rect.find("s:title", NS).text))
    return found


def gaps(root: ET.Element, kind: str) -> list[str]:
    return [r.find("s:title", NS).text for r in root.iterfind(f"s:rect[@class='tl-gap tl-{kind}']", NS)]


def test_a_failed_attempt_is_marked_then_a_retry_gap_then_the_attempt_that_passed(operator_client):
    handle = Flaky.submit({"fail_times": 1})
    t0 = timezone.now()
    drain(now=t0)
    drain(now=t0 + timedelta(seconds=30))
    assert ProcedureRun.objects.get(id=handle.id).status == "done"
    root = picture(operator_client, handle.id)
    failed = bars(root, "failed")
    assert len(failed) == 1
    link, words = failed[0]
    assert link == page_url(handle.id)
    assert "step 1 work · attempt 1 · failed" in words and "flaky failure on attempt 1" in words
    done = [w for _, w in bars(root, "done")]
    assert any("step 1 work · attempt 2 · done" in w for w in done) and any("step 0 prepare" in w for w in done)
    (retry,) = gaps(root, "retry")
    assert "waiting to retry" in retry
    assert root.find("s:title", NS).text.startswith("Timeline of the tree")


def test_time_spent_failed_until_an_operator_retried_is_drawn_as_its_own_kind(operator_client):
    from django_procedures import clock
    from django_procedures.store import operations

    handle = Flaky.submit({"fail_times": 3})  # three attempts allowed: it fails for good
    t0 = timezone.now()
    for seconds in (0, 10, 30):
        drain(now=t0 + timedelta(seconds=seconds))
    assert ProcedureRun.objects.get(id=handle.id).status == "failed"
    with clock.frozen_at(t0 + timedelta(minutes=5)):
        operations.retry(handle.id, by="alice")
    drain(now=t0 + timedelta(minutes=5, seconds=1))
    assert ProcedureRun.objects.get(id=handle.id).status == "done"
    root = picture(operator_client, handle.id)
    (manual,) = gaps(root, "manual")
    assert "failed, awaiting a manual retry · 4m 30s" in manual
    assert len(gaps(root, "retry")) == 2  # the automatic retries' backoff, and only those
    legend = "".join(t.text for t in root.iterfind(".//s:text[@class='tl-legend']", NS))
    assert "failed, awaiting a manual retry" in legend


def test_every_member_of_the_tree_is_a_lane_linking_to_its_page_and_the_parent_waits(operator_client):
    handle = TolerantParent.submit({"fanout": 3, "failing": [1]})
    drain()
    leaves = list(ProcedureRun.objects.filter(parent_id=handle.id).order_by("position"))
    root = picture(operator_client, leaves[2].id)
    links = {href for href, _ in bars(root, "done") + bars(root, "failed")}
    assert links == {page_url(handle.id), *(page_url(leaf.id) for leaf in leaves)}
    (failed_link, failed_words) = bars(root, "failed")[0]
    assert failed_link == page_url(leaves[1].id) and "leaf 1 refuses" in failed_words
    assert any("waiting for its children" in g for g in gaps(root, "waiting"))
    labels = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text") if "testapp." in (t.text or "")]
    assert labels[0].startswith("testapp.TolerantParent") and len(labels) == 4


def test_the_text_version_lists_every_drawn_segment(operator_client):
    handle = Flaky.submit({"fail_times": 1})
    t0 = timezone.now()
    drain(now=t0)
    drain(now=t0 + timedelta(seconds=30))
    response = operator_client.get(page_url(handle.id))
    (member,) = response.context["timeline_text"]
    assert member["href"] == page_url(handle.id)
    assert [s.split(" · ")[0] for s in member["segments"]] == [
        "queued, not claimed yet", "step 0 prepare", "step 1 work", "waiting to retry", "step 1 work"]
    assert 'id="proc-timeline-text"' in response.content.decode()


def test_a_large_tree_is_capped_and_says_how_many_members_are_hidden(operator_client, monkeypatch):
    monkeypatch.setattr(tree_timeline, "LANE_LIMIT", 3)
    handle = Parent.submit({"fanout": 6})
    drain()
    last = ProcedureRun.objects.filter(parent_id=handle.id).order_by("position").last()
    response = operator_client.get(page_url(last.id))
    timeline = response.context["timeline"]
    assert len(timeline.lanes) == 3 and timeline.hidden == 4
    assert last.id in {lane.member.key for lane in timeline.lanes} or str(last.id) in {
        lane.member.key for lane in timeline.lanes}
    html = response.content.decode()
    assert "4 more members of the tree are not drawn." in html
    assert f'href="{changelist_url()}?root__id__exact={handle.id}"' in html


def test_a_tree_cut_by_the_page_counts_its_hidden_members_with_one_capped_count(operator_client, monkeypatch):
    monkeypatch.setattr(reads, "TREE_LIMIT", 2)
    monkeypatch.setattr(tree_timeline, "COUNT_CAP", 3)
    handle = Parent.submit({"fanout": 5})
    drain()
    timeline = operator_client.get(page_url(handle.id)).context["timeline"]
    assert timeline.hidden_capped and timeline.hidden == 4 - len(timeline.lanes)


def test_the_timeline_costs_the_same_queries_whatever_the_tree_size(operator_client):
    def queries_for(fanout):
        handle = Parent.submit({"fanout": fanout})
        drain()
        operator_client.get(page_url(handle.id))
        with CaptureQueriesContext(connection) as captured:
            response = operator_client.get(page_url(handle.id))
        assert len(response.context["timeline"].lanes) == fanout + 1
        return len(captured), sum("procedures_step" in q["sql"] for q in captured)

    assert queries_for(2) == queries_for(12)


def test_nothing_is_drawn_before_any_step_ran(operator_client):
    handle = Flaky.submit({})
    response = operator_client.get(page_url(handle.id))
    assert response.context["timeline"] is None and 'id="proc-timeline"' not in response.content.decode()


def test_svg_text_and_attributes_are_escaped():
    markup = svg.tag("text", svg.text("<b>&"), title_='a"<', class_="x")
    assert markup == '<text title="a&quot;&lt;" class="x">&lt;b&gt;&amp;</text>'
    ET.fromstring(str(svg.svg(10, 10, "a <label>", markup)))


def test_only_the_latest_attempts_of_a_member_are_read():
    handle = Flaky.submit({"fail_times": 2})
    t0 = timezone.now() + timedelta(seconds=1)
    for seconds in (0, 10, 30):
        drain(now=t0 + timedelta(seconds=seconds))
    assert ProcedureRun.objects.get(id=handle.id).status == "done"
    attempts = tree_timeline.attempts_of([handle.id], per_member=2)[handle.id]
    assert sorted((a.name, a.attempt, a.status) for a in attempts) == [("work", 2, "failed"), ("work", 3, "done")]
    assert len(tree_timeline.attempts_of([handle.id])[handle.id]) == 4


def test_a_rolled_back_member_reads_rolled_back_in_words(operator_client):
    handle = Compensated.submit({})
    drain()
    assert ProcedureRun.objects.get(id=handle.id).status == "rolled_back"
    response = operator_client.get(page_url(handle.id))
    assert response.context["timeline_text"][0]["status"] == "rolled back"
