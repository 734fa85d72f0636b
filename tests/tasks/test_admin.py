"""Tasks in the admin: the kind filter, and a task's page (function, arguments, return value, attempts)."""

import re

import pytest

from django_procedures.testing import drain
from testproject.testapp import tasks
from testproject.testapp.procedures import ThreeSteps
from tests.admin.helpers import changelist_url, page_url
from tests.runs import page_text

pytestmark = pytest.mark.django_db


def ids_in(response) -> set[str]:
    return set(re.findall(r'name="_selected_action" value="([0-9a-f-]{36})"', response.content.decode()))


def test_the_kind_filter_lists_tasks_or_procedures(operator_client):
    added = tasks.add.enqueue(1, 2)
    emailed = tasks.send_email.enqueue("a@example.com")
    procedure = ThreeSteps.submit()
    assert ids_in(operator_client.get(changelist_url("kind=tasks"))) == {added.id, emailed.id}
    assert ids_in(operator_client.get(changelist_url("kind=procedures"))) == {str(procedure.id)}
    html = operator_client.get(changelist_url()).content.decode()
    assert "?kind=tasks" in html and "task:testproject.testapp.tasks.add" in html


def test_a_tasks_page_shows_its_function_arguments_attempts_and_return_value(operator_client):
    retried = tasks.flaky.enqueue(succeed_on=2)
    drain()
    text = page_text(operator_client.get(page_url(retried.id)))
    assert 'Task arguments Function testproject.testapp.tasks.flaky { "args": [], "kwargs": { "succeed_on": 2 } }' \
        in text
    assert 'Return value { "attempt": 2, "worker_ids": 2 }' in text
    assert "builtins.ValueError: attempt 1 fails on purpose" in text  # the failed attempt in the timeline


def test_a_procedures_page_is_unchanged(operator_client):
    handle = ThreeSteps.submit()
    text = page_text(operator_client.get(page_url(handle.id)))
    assert "State {" in text and "Function" not in text and "Task arguments" not in text
