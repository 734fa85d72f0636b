import pytest

from django_procedures import signals
from django_procedures.testing import drain
from testproject.testapp.procedures import Flaky, ThreeSteps

pytestmark = pytest.mark.django_db

ALL = ["procedure_submitted", "procedure_started", "step_committed", "procedure_retrying", "procedure_failed",
       "procedure_done", "procedure_released"]


@pytest.fixture
def received():
    seen = []
    handlers = {}
    for name in ALL:
        def handler(sender, name=name, **kwargs):
            seen.append((name, kwargs.get("step_name")))
        handlers[name] = handler
        getattr(signals, name).connect(handler)
    yield seen
    for name, handler in handlers.items():
        getattr(signals, name).disconnect(handler)


def test_transitions_send_signals_after_commit(received, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as pending:
        ThreeSteps.submit()
    assert received == []  # nothing before commit
    for callback in pending:
        callback()
    assert received == [("procedure_submitted", None)]
    received.clear()
    with django_capture_on_commit_callbacks(execute=True):
        drain()
    assert received == [("procedure_started", None), ("step_committed", "one"), ("step_committed", "two"),
                        ("step_committed", "three"), ("procedure_done", None)]


def test_retrying_and_failed_signals(received, django_capture_on_commit_callbacks):
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    with django_capture_on_commit_callbacks(execute=True):
        Flaky.submit({"fail_times": 9}, run_after=t0)
        for seconds in (0, 10, 30):
            drain(now=t0 + timedelta(seconds=seconds))
    names = [n for n, _ in received]
    assert names.count("procedure_retrying") == 2 and names.count("procedure_failed") == 1
