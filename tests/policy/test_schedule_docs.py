"""docs/schedules.md holds the tick-by-tick tables the decision functions compute, verbatim."""

import re
from pathlib import Path

import pytest

from .schedule_tables import tables

DOCS = Path(__file__).resolve().parents[2] / "docs" / "schedules.md"


def documented() -> dict[str, str]:
    text = DOCS.read_text()
    return {m.group(1): m.group(2).strip() for m in
            re.finditer(r"<!-- table: (.+?) -->\n(.*?)<!-- end table -->", text, re.S)}


@pytest.mark.parametrize(("name", "expected"), tables().items(), ids=tables().keys())
def test_the_docs_show_what_the_decision_does(name, expected):
    assert documented().get(name) == expected, (
        f"docs/schedules.md is out of date for {name!r}; `python -m tests.policy.schedule_tables` prints the tables")


def test_every_documented_table_is_computed():
    assert set(documented()) == set(tables())
