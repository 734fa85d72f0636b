"""``PROCEDURES["MAX_STATE_BYTES"]``: a state too large is refused at submit and fails the checkpoint that would
write it, measured by the JSON text the write then reuses."""

import pytest
from django.test import override_settings

from django_procedures import Procedure, Status, step
from django_procedures.models import ProcedureRun, Step
from django_procedures.policy import state as state_module
from django_procedures.policy.state import StateTooLarge, encode_state
from django_procedures.testing import drain
from testproject.testapp.procedures import Leaf, ThreeSteps

pytestmark = pytest.mark.django_db
LIMIT = 4096


class Grows(Procedure):
    """Its first step puts ``state["grow"]`` bytes of text in the state; ``state["then"]`` says what it returns."""

    type_name = "tests.Grows"

    @step
    def grow(self, ctx):
        self.state["blob"] = "x" * self.state["grow"]
        if self.state["then"] == "done":
            return Status.done(output="grown")
        if self.state["then"] == "suspend":
            return Status.suspended([Leaf({"n": 1})])
        return None

    @step
    def after(self, ctx):
        self.state["after"] = True


@override_settings(PROCEDURES={"MAX_STATE_BYTES": LIMIT})
def test_submit_refuses_a_state_over_the_limit_with_a_value_error_naming_the_size_and_setting():
    state = {"blob": "x" * LIMIT}
    size = len(encode_state(state))
    message = (f"state is {size:,} bytes as JSON, more than PROCEDURES['MAX_STATE_BYTES'] (4,096 bytes); keep "
               "large data elsewhere")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        ThreeSteps.submit(state)
    with pytest.raises(StateTooLarge):
        ThreeSteps.submit_many([{}, state])
    assert not ProcedureRun.objects.exists()

    fits = {"blob": "x" * (LIMIT - len(encode_state({"blob": ""})))}
    assert len(encode_state(fits)) == LIMIT
    ThreeSteps.submit(fits)  # the limit itself is allowed


@override_settings(PROCEDURES={"MAX_STATE_BYTES": LIMIT})
@pytest.mark.parametrize("then", ["checkpoint", "done", "suspend"])
def test_a_checkpoint_over_the_limit_fails_the_attempt_as_non_retryable_naming_the_size(then):
    handle = Grows.submit({"grow": 10 * LIMIT, "then": then})
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed" and run.attempt == 2, (run.status, run.error)  # one attempt: not retried
    assert run.error.startswith("NonRetryable: cannot save the checkpoint of step grow: state is ")
    assert "bytes as JSON, more than PROCEDURES['MAX_STATE_BYTES'] (4,096 bytes)" in run.error
    assert "blob" not in run.state  # the checkpoint before it is kept
    assert list(Step.objects.filter(procedure_id=handle.id).values_list("name", "status")) == [("grow", "failed")]
    assert ProcedureRun.objects.count() == 1  # no child was started


@override_settings(PROCEDURES={"MAX_STATE_BYTES": LIMIT})
def test_a_state_within_the_limit_is_checkpointed_as_before():
    handle = Grows.submit({"grow": LIMIT // 2, "then": "checkpoint"})
    drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "done" and run.state["blob"] == "x" * (LIMIT // 2) and run.state["after"] is True


def test_the_checkpoint_writes_the_text_it_measured_instead_of_encoding_the_state_again(monkeypatch):
    encoded = []
    keep_floats = state_module.keep_floats
    monkeypatch.setattr(state_module, "keep_floats", lambda text: encoded.append(text) or keep_floats(text))
    handle = Grows.submit({"grow": 1000, "then": "checkpoint"})
    drain()
    assert ProcedureRun.objects.get(id=handle.id).status == "done"
    checkpoints = [text for text in encoded if '"blob"' in text]
    assert len(checkpoints) == 2  # one per checkpoint (grow, after), whichever rows the write fills
