"""``Limit`` values, their checks, and the pure admission decision (no database)."""

from datetime import timedelta

import pytest
from django.test import override_settings

from django_procedures import Limit
from django_procedures.checks import check_limits_methods, check_settings
from django_procedures.policy.limits import (
    MAX_NAME_LENGTH,
    Use,
    admits,
    parse,
    queue_limits,
    stored_limits,
)
from django_procedures.testing import isolated_registry


def test_concurrency_and_rate_are_made_and_stored():
    assert Limit.concurrency("crm", 5).stored() == ["crm", "concurrency", 5, 0.0]
    assert Limit.rate("api", 100, timedelta(minutes=1)).stored() == ["api", "rate", 100, 60.0]
    assert Limit.rate("api", 100, 60) == Limit.rate("api", 100, 60.0)
    assert parse([Limit.rate("api", 3, 1.5).stored()]) == [Limit.rate("api", 3, 1.5)]


@pytest.mark.parametrize(("make", "error", "words"), [
    (lambda: Limit.concurrency("crm", 0), ValueError, "at least 1"),
    (lambda: Limit.concurrency("crm", -2), ValueError, "at least 1"),
    (lambda: Limit.concurrency("crm", 2.5), TypeError, "must be an int"),
    (lambda: Limit.concurrency("crm", True), TypeError, "must be an int"),
    (lambda: Limit.rate("api", 1.5, 60), TypeError, "count must be an int"),
    (lambda: Limit.rate("api", 10, 0), ValueError, "positive, finite"),
    (lambda: Limit.rate("api", 10, timedelta(0)), ValueError, "positive, finite"),
    (lambda: Limit.rate("api", 10, float("inf")), ValueError, "positive, finite"),
    (lambda: Limit.rate("api", 10, "60"), TypeError, "timedelta or seconds"),
    (lambda: Limit.concurrency("", 1), ValueError, "must not be empty"),
    (lambda: Limit.concurrency("x" * (MAX_NAME_LENGTH + 1), 1), ValueError, "at most 200 characters"),
    (lambda: Limit.concurrency(7, 1), TypeError, "must be a str"),
    (lambda: Limit.concurrency("crm", 2**31), ValueError, "at most 2147483647"),
    (lambda: Limit.rate("api", 10_001, 60), ValueError, "at most 10000"),
    (lambda: Limit.rate("api", 10, 1e12), ValueError, "at most ten years"),
])
def test_bad_limits_are_refused_where_made(make, error, words):
    with pytest.raises(error, match=words):
        make()


def test_limits_returns_are_checked():
    with pytest.raises(TypeError, match=r"P.limits\(\) must return Limit"):
        stored_limits([Limit.concurrency("a", 1), "b"], "P")
    with pytest.raises(TypeError, match="a list of Limit"):
        stored_limits(Limit.concurrency("a", 1), "P")
    assert stored_limits([], "P") is None
    # One per name and kind, the stricter kept, sorted.
    assert stored_limits([Limit.concurrency("b", 3), Limit.concurrency("a", 2), Limit.concurrency("b", 1)], "P") == [
        ["a", "concurrency", 2, 0.0], ["b", "concurrency", 1, 0.0]]


def test_a_concurrency_limit_admits_below_max_and_says_which_is_full():
    crm = [Limit.concurrency("crm-api", 5)]
    assert admits(crm, {"crm-api": Use(4)}) is None
    assert admits(crm, {}) is None  # a name no slot was made for yet
    assert admits(crm, {"crm-api": Use(5)}) == "crm-api: 5 of 5 running"


def test_a_rate_admits_while_fewer_than_count_claims_are_in_its_window():
    api = [Limit.rate("api", 3, 10)]
    assert admits(api, {"api": Use(recent=2)}) is None
    assert admits(api, {"api": Use(recent=3)}) == "api: 3 of 3 per 10s"
    assert admits(api, {"api": Use(in_use=7, recent=0)}) is None  # leases holding a rate name are not counted


def test_queue_limits_from_settings():
    found = queue_limits({"email": {"concurrency": 10, "rate": (100, 60)}})
    assert found == {"email": [Limit.concurrency("queue:email", 10), Limit.rate("queue:email", 100, 60)]}
    with pytest.raises(ValueError, match="unknown keys"):
        queue_limits({"email": {"concurency": 10}})
    with pytest.raises(TypeError, match=r"\(count, per\)"):
        queue_limits({"email": {"rate": 100}})


@pytest.mark.parametrize("queues", [
    {"email": {"concurrency": 0}}, {"email": {"rate": (100, 0)}}, {"email": {"rate": (1.5, 60)}},
    {"email": 10}, [("email", 10)], {"email": {"concurrency": 1, "speed": 2}},
])
def test_bad_queue_limits_fail_the_checks(queues):
    with override_settings(PROCEDURES={"QUEUES": queues}):
        assert "django_procedures.E021" in [e.id for e in check_settings()]


def test_good_queue_limits_pass_the_checks():
    with override_settings(PROCEDURES={"QUEUES": {"email": {"concurrency": 10, "rate": (100, 60)}}}):
        assert [e for e in check_settings() if e.level >= 40] == []


def test_a_limits_attribute_that_is_not_a_method_fails_a_check():
    from django_procedures import Procedure, step

    with isolated_registry():
        class Wrong(Procedure):
            type_name = "tests.WrongLimits"
            limits = [Limit.concurrency("a", 1)]  # type: ignore[assignment]

            @step
            def only(self, ctx):
                pass

        assert [e.id for e in check_limits_methods() if e.obj is Wrong] == ["django_procedures.E022"]
    assert [e.id for e in check_limits_methods()] == []
