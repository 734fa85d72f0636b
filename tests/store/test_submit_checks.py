"""Submit's door: every option checked with a message that says what to pass; keys that mean something."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import models

from django_procedures import Procedure, RetryPolicy, get_handle, step
from django_procedures.exceptions import KeyConflict
from django_procedures.models import ProcedureRun
from django_procedures.policy import options
from django_procedures.testing import drain
from testproject.testapp.procedures import Leaf, ThreeSteps

pytestmark = pytest.mark.django_db


def nothing_stored():
    return not ProcedureRun.objects.exists()


# -- keys (item 10) ----------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["", "   ", "\t\n"])
def test_an_empty_or_blank_key_is_refused(key):
    with pytest.raises(ValueError, match="empty or blank"):
        Leaf.submit({"n": 1}, key=key)
    with pytest.raises(ValueError, match=r"keys\[1\] .* empty or blank"):
        Leaf.submit_many([{"n": 1}, {"n": 2}], keys=["fine", key])
    with pytest.raises(ValueError, match=r"keys\[0\] .* empty or blank"):  # the name the caller used
        Leaf.submit_many([{"n": 1}], keys=[key])
    assert nothing_stored()


def test_a_key_reused_by_the_same_type_returns_the_existing_procedure():
    first = Leaf.submit({"n": 1}, key="leaf:1")
    again = Leaf.submit({"n": 2}, key="leaf:1")
    assert again == first and ProcedureRun.objects.count() == 1


def test_a_key_reused_by_another_type_is_refused_naming_the_existing_procedure():
    leaf = Leaf.submit({"n": 1}, key="shared")
    with pytest.raises(KeyConflict) as caught:
        ThreeSteps.submit({}, key="shared")
    message = str(caught.value)
    assert str(leaf.id) in message and "testapp.Leaf" in message and "testapp.ThreeSteps" in message
    assert (caught.value.existing_id, caught.value.existing_type) == (leaf.id, "testapp.Leaf")
    assert isinstance(caught.value, ValueError)
    assert list(ProcedureRun.objects.values_list("type_name", flat=True)) == ["testapp.Leaf"]


def test_a_cross_type_reuse_in_submit_many_inserts_none_of_the_batch():
    Leaf.submit({"n": 1}, key="taken")
    with pytest.raises(KeyConflict):
        ThreeSteps.submit_many([{}, {}, {}], keys=["fresh", None, "taken"])
    assert list(ProcedureRun.objects.values_list("key", flat=True)) == ["taken"]


@pytest.mark.parametrize(("key", "error", "words"), [
    (5, TypeError, "must be a str"),
    (b"bytes", TypeError, "must be a str"),
    ("k" * 256, ValueError, "at most 255"),
    ("a\x00b", ValueError, "NUL"),
])
def test_a_key_of_the_wrong_type_or_size_is_refused(key, error, words):
    with pytest.raises(error, match=words):
        Leaf.submit({"n": 1}, key=key)
    assert nothing_stored()


# -- submitting an instance (item 11) ------------------------------------------------------------


def test_submitting_an_instance_submits_its_state_and_options():
    handle = Leaf({"n": 21}, queue="instances", priority=7, key="leaf:21").submit()
    row = ProcedureRun.objects.get(id=handle.id)
    assert (row.state, row.queue, row.priority, row.key) == ({"n": 21}, "instances", 7, "leaf:21")
    drain(queues=["instances"])
    assert handle.refresh().status == "done" and handle.output == 42


def test_an_instance_takes_the_options_it_lacks_from_submit():
    handle = Leaf({"n": 1}, queue="q").submit(priority=3, run_after=timedelta(hours=1))
    row = ProcedureRun.objects.get(id=handle.id)
    assert (row.queue, row.priority) == ("q", 3) and row.run_at > row.created_at + timedelta(minutes=59)


def test_an_instance_refuses_a_second_state_or_a_second_value_of_an_option():
    with pytest.raises(TypeError, match="submits the instance's own state"):
        Leaf({"n": 1}).submit({"n": 2})
    with pytest.raises(TypeError, match="queue given both"):
        Leaf({"n": 1}, queue="a").submit(queue="b")
    assert nothing_stored()


def test_the_class_still_submits_the_state_it_is_given():
    handle = Leaf.submit({"n": 4})
    assert ProcedureRun.objects.get(id=handle.id).state == {"n": 4}


# -- option types (item 12) ----------------------------------------------------------------------


def test_run_after_takes_seconds_a_timedelta_or_an_aware_datetime():
    seconds = ProcedureRun.objects.get(id=Leaf.submit({}, run_after=60).id)
    assert seconds.run_at - seconds.created_at == timedelta(seconds=60)
    fraction = ProcedureRun.objects.get(id=Leaf.submit({}, run_after=1.5).id)
    assert fraction.run_at - fraction.created_at == timedelta(seconds=1.5)
    moment = datetime(2100, 1, 1, tzinfo=UTC)
    assert ProcedureRun.objects.get(id=Leaf.submit({}, run_after=moment).id).run_at == moment


@pytest.mark.parametrize(("run_after", "error", "words"), [
    ("soon", TypeError, "aware datetime, a timedelta or a number of seconds"),
    (True, TypeError, "aware datetime, a timedelta or a number of seconds"),
    (datetime(2030, 1, 1), ValueError, "naive datetime"),
    (float("nan"), ValueError, "finite number of seconds"),
    (float("inf"), ValueError, "finite number of seconds"),
    (1_764_000_000, ValueError, "looks like a Unix timestamp"),
    (timedelta(days=999_999_999), ValueError, "past the year 9999"),
])
def test_a_bad_run_after_is_refused_saying_what_to_pass(run_after, error, words):
    with pytest.raises(error, match=words):
        Leaf.submit({}, run_after=run_after)
    with pytest.raises(error, match=words):
        Leaf.submit_many([{}], run_after=run_after)
    assert nothing_stored()


@pytest.mark.parametrize(("queue", "error", "words"), [
    (5, TypeError, "queue name"),
    ("", ValueError, "non-empty"),
    ("  ", ValueError, "non-empty"),
    (" padded", ValueError, "surrounding spaces"),
    ("a,b", ValueError, "comma"),
    ("q" * 101, ValueError, "at most 100"),
])
def test_a_bad_queue_is_refused_not_stored_converted(queue, error, words):
    with pytest.raises(error, match=words):
        Leaf.submit({}, queue=queue)
    with pytest.raises(error, match=words):
        Leaf.submit_many([{}], queue=queue)
    assert nothing_stored()


@pytest.mark.parametrize(("priority", "error", "words"), [
    ("high", TypeError, "must be an int"),
    (True, TypeError, "must be an int"),
    (1.5, TypeError, "must be an int"),
    (2**31, ValueError, "between"),
    (-(2**31) - 1, ValueError, "between"),
])
def test_a_bad_priority_is_refused(priority, error, words):
    with pytest.raises(error, match=words):
        Leaf.submit({}, priority=priority)
    assert nothing_stored()


def test_a_bad_parent_is_refused_saying_what_to_pass():
    with pytest.raises(TypeError, match="parent must be a ProcedureHandle, a ProcedureRun or a procedure id"):
        Leaf.submit({}, parent=5)
    parent = Leaf.submit({})
    child = Leaf.submit({}, parent=str(parent.id))
    assert ProcedureRun.objects.get(id=child.id).parent_id == parent.id
    assert get_handle(child.id) == child


@pytest.mark.parametrize("status", ["done", "failed", "rolled_back", "cancelled"])
def test_a_final_parent_is_refused_naming_its_status(status):
    parent = Leaf.submit({})
    ProcedureRun._writer.filter(id=parent.id).update(status=status)
    words = f"parent procedure {parent.id} is {status}: children can only be added to a procedure that is not final"
    with pytest.raises(ValueError, match=words):
        Leaf.submit({}, parent=parent)
    with pytest.raises(ValueError, match=words):
        Leaf.submit_many([{}, {}], parent=parent.id)
    assert list(ProcedureRun.objects.values_list("id", flat=True)) == [parent.id]


def test_submit_many_refuses_one_dict_or_a_string_of_keys():
    with pytest.raises(TypeError, match="takes a list of states"):
        Leaf.submit_many({"n": 1})
    with pytest.raises(TypeError, match="one key"):
        Leaf.submit_many([{}, {}], keys="ab")
    assert nothing_stored()


# -- children and classes --------------------------------------------------------------------------


def test_a_childs_options_are_checked_where_it_is_made():
    with pytest.raises(TypeError, match="queue name"):
        Leaf({"n": 1}, queue=5)
    with pytest.raises(TypeError, match="must be an int"):
        Leaf({"n": 1}, priority="high")
    with pytest.raises(TypeError, match="state must be a dict"):
        Leaf("n=1")
    assert Leaf({"n": 1}, run_after=60).options["run_after"] == timedelta(seconds=60)


@pytest.mark.parametrize(("attributes", "words"), [
    ({"priority": "high"}, "priority must be an int"),
    ({"queue": 5}, "queue must be a queue name"),
    ({"retry": 3}, "retry must be a RetryPolicy"),
    ({"redact": "password"}, "redact must be a tuple of state keys"),
    ({"redact": ("password", 1)}, "redact must be a tuple of state keys"),
])
def test_a_class_with_a_bad_attribute_is_refused_when_defined(attributes, words):
    def body(ns):
        ns.update(attributes, type_name="tests.BadAttributes")
        ns["go"] = step(lambda self, ctx: None)

    with pytest.raises(TypeError, match=words):
        import types

        types.new_class("BadAttributes", (Procedure,), exec_body=body)


def test_good_class_attributes_pass():
    class Fine(Procedure):
        abstract = True
        queue, priority, retry, redact = "fine", -3, RetryPolicy(), ["secret"]

    assert Fine.priority == -3


def test_the_limits_are_the_columns():
    field = ProcedureRun._meta.get_field
    assert field("queue").max_length == options.QUEUE_MAX_LENGTH
    assert field("key").max_length == options.KEY_MAX_LENGTH
    assert type(field("priority")) is models.IntegerField  # 32-bit on every backend


@pytest.mark.parametrize(("queue", "words"), [("a,b", "comma"), (" q", "surrounding spaces")])
def test_a_schedule_refuses_a_queue_no_worker_could_serve(queue, words):
    from django.core.exceptions import ValidationError

    from django_procedures import register_schedule

    with pytest.raises(ValidationError, match=words):
        register_schedule("bad-queue", Leaf, period=timedelta(minutes=5), queue=queue)
