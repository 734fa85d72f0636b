import random
from datetime import UTC, datetime, timedelta

import pytest

from django_procedures.policy.retry import (
    FailDecision,
    RetryDecision,
    RetryPolicy,
    decide_error,
    decide_failure,
    is_poisonous,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("policy", "attempt", "expected"),
    [
        (RetryPolicy(initial_delay=1, backoff=2, max_delay=300, jitter=0), 1, 1),
        (RetryPolicy(initial_delay=1, backoff=2, max_delay=300, jitter=0), 2, 2),
        (RetryPolicy(initial_delay=1, backoff=2, max_delay=300, jitter=0), 5, 16),
        (RetryPolicy(initial_delay=1, backoff=2, max_delay=10, jitter=0), 8, 10),
        (RetryPolicy(initial_delay=3, backoff=1, jitter=0), 7, 3),
        (RetryPolicy(initial_delay=0, jitter=0.5), 3, 0),
    ],
)
def test_delay_is_capped_exponential(policy, attempt, expected):
    assert policy.delay(attempt) == expected


def test_jitter_stays_within_its_fraction():
    policy = RetryPolicy(initial_delay=10, backoff=1, jitter=0.1)
    rng = random.Random(7)
    delays = [policy.delay(1, rng) for _ in range(500)]
    assert min(delays) >= 9 and max(delays) <= 11
    assert max(delays) - min(delays) > 1  # it does spread


@pytest.mark.parametrize(
    ("failures_before", "max_attempts", "expected"),
    [(0, 3, RetryDecision), (1, 3, RetryDecision), (2, 3, FailDecision), (0, 1, FailDecision)],
)
def test_budget_counts_failed_attempts(failures_before, max_attempts, expected):
    policy = RetryPolicy(max_attempts=max_attempts, initial_delay=1, backoff=2, jitter=0)
    decision = decide_failure(policy, failures_before=failures_before, now=NOW, retryable=True)
    assert isinstance(decision, expected)
    if isinstance(decision, RetryDecision):
        assert decision.failures == failures_before + 1
        assert decision.run_at == NOW + timedelta(seconds=2**failures_before)


def test_not_retryable_fails_at_once_and_keeps_manual_retry_flag():
    decision = decide_failure(RetryPolicy(), failures_before=0, now=NOW, retryable=False, manual_retry=False)
    assert decision == FailDecision("not retryable", manual_retry=False)


class _Permanent(Exception):
    """Stands for the caller's ``NonRetryable`` (policy/ imports nothing of the package)."""

    def __init__(self, manual_retry: bool = True) -> None:
        super().__init__("no")
        self.manual_retry = manual_retry


class _HostileFlag(Exception):
    @property
    def manual_retry(self):
        raise RuntimeError("foreign code")


_POLICY = RetryPolicy(max_attempts=3, initial_delay=1, backoff=2, jitter=0, non_retryable=(KeyError,))


@pytest.mark.parametrize(
    ("error", "failures_before", "expected"),
    [
        (ValueError("x"), 0, RetryDecision(NOW + timedelta(seconds=1), 1)),
        (ValueError("x"), 2, FailDecision("gave up after 3 failed attempts", True)),
        (KeyError("x"), 0, FailDecision("not retryable", True)),  # listed in the policy
        (_Permanent(), 0, FailDecision("not retryable", True)),  # the caller's permanent type
        (_Permanent(manual_retry=False), 0, FailDecision("not retryable", False)),
        (_HostileFlag(), 2, FailDecision("gave up after 3 failed attempts", True)),  # a flag that raises: True
    ],
)
def test_decide_error_is_the_retry_or_fail_decision_for_a_raised_error(error, failures_before, expected):
    decision = decide_error(_POLICY, error, failures_before=failures_before, now=NOW, permanent=(_Permanent,))
    assert decision == expected


def test_poisonous_after_max_lost():
    policy = RetryPolicy(max_lost=3)
    assert [is_poisonous(policy, n) for n in range(5)] == [False, False, False, True, True]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be at least 1"),
        ({"max_lost": 0}, "max_lost must be at least 1"),
        ({"backoff": 0.5}, "backoff must be at least 1"),
        ({"jitter": 2}, "jitter is a fraction"),
        ({"initial_delay": -1}, "initial_delay must be between 0 and"),
    ],
)
def test_bad_policies_say_what_to_change(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize(("fields", "message"), [
    ({"initial_delay": 1e12}, r"initial_delay must be between 0 and 31,536,000 seconds \(one year\); got 1e?0+"),
    ({"initial_delay": float("inf")}, r"initial_delay must be between 0 and 31,536,000 seconds .*; got inf"),
    ({"initial_delay": float("nan")}, r"initial_delay must be between 0 and 31,536,000 seconds .*; got nan"),
    ({"initial_delay": -1}, r"initial_delay must be between 0 and 31,536,000 seconds .*; got -1"),
    ({"max_delay": 1e12}, r"max_delay must be between 0 and 31,536,000 seconds"),
    ({"max_delay": float("inf")}, r"max_delay must be between 0 and 31,536,000 seconds"),
    ({"max_delay": float("nan")}, r"max_delay must be between 0 and 31,536,000 seconds"),
    ({"backoff": float("nan")}, r"backoff must be at least 1 and finite .*; got nan"),
    ({"backoff": float("inf")}, r"backoff must be at least 1 and finite .*; got inf"),
    ({"backoff": 0.5}, r"backoff must be at least 1 and finite"),
    ({"jitter": float("nan")}, r"jitter is a fraction of the delay between 0 and 1; got nan"),
    ({"jitter": 1.5}, r"jitter is a fraction of the delay between 0 and 1; got 1.5"),
    ({"jitter": -0.1}, r"jitter is a fraction of the delay between 0 and 1"),
])
def test_a_delay_that_cannot_be_scheduled_is_refused_naming_the_field_and_bound(fields, message):
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**fields)


@pytest.mark.parametrize("fields", [{"initial_delay": "1"}, {"max_delay": None}, {"backoff": True},
                                    {"jitter": "0.1"}])
def test_a_field_that_is_not_a_number_is_a_type_error_naming_it(fields):
    (name,) = fields
    with pytest.raises(TypeError, match=f"{name} must be a number"):
        RetryPolicy(**fields)


def test_the_longest_delays_are_accepted_and_schedulable():
    policy = RetryPolicy(max_attempts=10_000, initial_delay=365 * 86400, max_delay=365 * 86400, backoff=1e300,
                         jitter=0)
    assert policy.delay(5_000) == 365 * 86400  # backoff ** attempt overflows a float: the cap holds
    decision = decide_failure(policy, failures_before=4_999, now=NOW, retryable=True)
    assert decision.run_at == NOW + timedelta(days=365)
