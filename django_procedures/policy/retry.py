"""Retry policy and the pure decision taken when a step attempt fails."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

#: The longest delay a policy may name: one year, in seconds. Longer is a typo or a unit mistake, and far
#: longer (1e12 s, infinity) is a ``run_at`` no ``datetime`` can hold.
MAX_DELAY_SECONDS = 365 * 24 * 3600.0


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how soon a failing step is tried again.

    ``max_attempts`` counts failed attempts of one step: with 5, the fifth
    failure is permanent. ``max_lost`` is the separate budget for attempts
    lost with their worker: when a worker has been lost that many times during
    one step, the procedure fails as poisonous. Delays follow
    ``min(max_delay, initial_delay * backoff ** (attempt - 1))`` spread by
    ``± jitter`` (a fraction of the delay).
    """

    max_attempts: int = 3
    initial_delay: float = 1.0
    backoff: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.1
    max_lost: int = 10
    non_retryable: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1; got {self.max_attempts}")
        if self.max_lost < 1:
            raise ValueError(f"max_lost must be at least 1; got {self.max_lost}")
        for name in ("initial_delay", "max_delay"):
            value = _number(name, getattr(self, name))
            if not 0 <= value <= MAX_DELAY_SECONDS:  # NaN fails both comparisons
                raise ValueError(f"{name} must be between 0 and {MAX_DELAY_SECONDS:,.0f} seconds (one year); "
                                 f"got {value!r}")
        backoff = _number("backoff", self.backoff)
        if not 1 <= backoff < math.inf:
            raise ValueError(f"backoff must be at least 1 and finite (1 keeps the delay constant); "
                             f"got {backoff!r}")
        jitter = _number("jitter", self.jitter)
        if not 0 <= jitter <= 1:
            raise ValueError(f"jitter is a fraction of the delay between 0 and 1; got {jitter!r}")
        object.__setattr__(self, "non_retryable", tuple(self.non_retryable))

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        try:
            base = min(self.max_delay, self.initial_delay * self.backoff ** (attempt - 1))
        except OverflowError:  # backoff ** attempt past a float, long after the cap was reached
            base = self.max_delay
        if not self.jitter or not base:
            return base
        spread = base * self.jitter
        return max(0.0, base + (rng or random).uniform(-spread, spread))


def _number(name: str, value: object) -> float:
    """``value`` if it is a real number (not a bool); a ``TypeError`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number (int or float); got {value!r}")
    return value


@dataclass(frozen=True)
class RetryDecision:
    """Try again at ``run_at``: the failure was attempt ``failures`` of the budget."""

    run_at: datetime
    failures: int


@dataclass(frozen=True)
class FailDecision:
    """Fail for good; ``manual_retry`` says whether an operator retry makes sense."""

    reason: str
    manual_retry: bool


def decide_failure(
    policy: RetryPolicy,
    *,
    failures_before: int,
    now: datetime,
    retryable: bool,
    manual_retry: bool = True,
    rng: random.Random | None = None,
) -> RetryDecision | FailDecision:
    """Decide what a failed attempt leads to.

    ``failures_before`` is the number of failed attempts of this step already
    counted against the budget (reset by a manual retry).
    """
    failures = failures_before + 1
    if not retryable:
        return FailDecision("not retryable", manual_retry)
    if failures >= policy.max_attempts:
        return FailDecision(f"gave up after {failures} failed attempts", manual_retry)
    return RetryDecision(now + timedelta(seconds=policy.delay(failures, rng)), failures)


def is_permanent(policy: RetryPolicy, error: BaseException,
                 permanent: tuple[type[BaseException], ...] = ()) -> bool:
    """Whether ``error`` fails the attempt for good: one of ``permanent`` (the caller's ``NonRetryable``) or of
    ``policy.non_retryable``."""
    return isinstance(error, (*permanent, *policy.non_retryable))


def manual_retry_of(error: BaseException) -> bool:
    """``error.manual_retry`` (``NonRetryable(..., manual_retry=False)``); True if it has none, or it raises."""
    try:
        return bool(getattr(error, "manual_retry", True))
    except BaseException:  # foreign code
        return True


def decide_error(
    policy: RetryPolicy,
    error: BaseException,
    *,
    failures_before: int,
    now: datetime,
    permanent: tuple[type[BaseException], ...] = (),
    rng: random.Random | None = None,
) -> RetryDecision | FailDecision:
    """The retry-or-fail decision for an attempt (a step's or a rollback's) that raised ``error``.

    ``error`` is not retried if :func:`is_permanent`; a permanent failure may be
    retried by hand unless ``error.manual_retry`` is false (see :func:`manual_retry_of`).
    """
    return decide_failure(policy, failures_before=failures_before, now=now,
                          retryable=not is_permanent(policy, error, permanent), manual_retry=manual_retry_of(error),
                          rng=rng)


def is_poisonous(policy: RetryPolicy, lost: int) -> bool:
    """True when the worker was lost often enough during one step to stop trying."""
    return lost >= policy.max_lost
