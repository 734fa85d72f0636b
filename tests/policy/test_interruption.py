"""Whether a stopped claim is given back or parked: one decision for every way a worker stops a claim."""

import pytest

from django_procedures.policy.interruption import Interruption, after_interruption


@pytest.mark.parametrize(("step_began", "idempotent", "expected"), [
    (True, False, "park"),  # a non-idempotent step that began may have taken effect
    (False, False, "release"),  # one that never began cannot have
    (True, True, "release"),  # an idempotent step simply runs again elsewhere
    (False, True, "release"),
])
def test_only_a_non_idempotent_step_that_began_is_parked(step_began, idempotent, expected):
    assert after_interruption(Interruption(step_began=step_began, idempotent=idempotent)) == expected
