"""``Context`` as users see it: its constructor takes where the run is, nothing of the worker's internals."""

import uuid

import pytest

from django_procedures import Context


def test_a_context_made_by_hand_is_active_and_its_progress_goes_nowhere():
    ctx = Context(procedure_id=uuid.uuid4(), type_name="shop.Refund", step_name="charge")
    ctx.ensure_active()  # a step unit-tested with it is never stopped
    ctx.progress(1, 2, "half")  # and may report progress
    assert (ctx.attempt, ctx.step_index, ctx.children) == (1, 0, ())
    assert "shop.Refund" in repr(ctx) and "activity" not in repr(ctx)


@pytest.mark.parametrize("internal", ["activity", "_activity", "progress_recorder", "_claim"])
def test_the_workers_internals_are_not_constructor_arguments(internal):
    with pytest.raises(TypeError):
        Context(procedure_id=uuid.uuid4(), type_name="shop.Refund", **{internal: None})
