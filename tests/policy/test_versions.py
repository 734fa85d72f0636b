"""policy.versions: a class's version and renamed steps, which step a stored run resumes at, changed step lists."""

import pytest

from django_procedures.policy.versions import (
    Position,
    changed_without_version,
    check_renamed_steps,
    check_version,
    missing_step_text,
    resolve_step,
)

STEPS = ["fetch", "transform", "upload"]


@pytest.mark.parametrize("version", [1, 2, 40])
def test_versions_that_are_ints_of_at_least_one(version):
    assert check_version(version, "Job") == version


@pytest.mark.parametrize("version", [0, -1, 1.0, "2", None, True])
def test_anything_else_is_refused_saying_what_to_write(version):
    with pytest.raises(ValueError, match=r"Job.version must be an int from 1 to 2147483647 .*; got "):
        check_version(version, "Job")


@pytest.mark.parametrize(("renamed", "fragment"), [
    ({"download": "gone"}, "maps 'download' to 'gone', which is not a step of Job"),
    ({"fetch": "upload"}, "maps 'fetch', which is still a step of Job"),
    ("download=fetch", "must be a dict of step names"),
    ({"download": 3}, "must be a dict of step names"),
])
def test_renamed_steps_must_map_old_names_to_steps_of_the_class(renamed, fragment):
    with pytest.raises(ValueError, match=fragment):
        check_renamed_steps(renamed, STEPS, "Job")


@pytest.mark.parametrize(("name", "renamed", "found"), [
    ("transform", {}, "transform"),
    ("download", {"download": "fetch"}, "fetch"),
    ("download", {}, None),
    ("transform", {"transform": "upload"}, "transform"),  # a step that exists wins
])
def test_resolve_step(name, renamed, found):
    assert resolve_step(name, STEPS, renamed) == found


def test_the_missing_step_text_names_the_step_the_type_and_both_versions():
    text = missing_step_text("label", "shop.Ship", 1, 3)
    assert "step 'label' no longer exists in shop.Ship" in text
    assert "version 1" in text and "version 3" in text and "renamed_steps" in text


@pytest.mark.parametrize(("position", "changed"), [
    (Position("t", 2, 0, "fetch"), False),
    (Position("t", 2, 1, "transform"), False),
    (Position("t", 2, 3, ""), False),  # suspended in its last step
    (Position("t", 2, 1, "fetch"), True),  # a step was added before fetch, or the steps reordered
    (Position("t", 2, 1, "clean"), True),  # removed
    (Position("t", 2, 4, ""), True),  # the last step removed
    (Position("t", 2, 3, "upload"), True),
    (Position("t", 2, 1, "transform_old"), False),  # mapped by renamed_steps
    (Position("t", 1, 1, "clean"), False),  # an older version: upgraded, not flagged
    (Position("t", 3, 1, "clean"), False),  # a newer version: another worker's
])
def test_changed_without_version(position, changed):
    found = changed_without_version(STEPS, 2, [position], {"transform_old": "transform"})
    assert found == ([position] if changed else [])
