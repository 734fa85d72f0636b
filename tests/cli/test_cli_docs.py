"""docs/cli.md: every command line in it is accepted by the real parser, and every subcommand is documented."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from django_procedures.cli import SUBCOMMANDS
from django_procedures.management.commands.procedures import Command

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def command_lines() -> list[str]:
    return re.findall(r"^\$ python manage\.py procedures (.+)$", DOC.read_text(), flags=re.MULTILINE)


def test_the_doc_shows_command_lines_of_every_subcommand():
    shown = {shlex.split(line)[0] for line in command_lines()}
    assert shown == set(SUBCOMMANDS)


@pytest.mark.parametrize("line", command_lines())
def test_every_command_line_in_the_doc_parses(line):
    parser = Command().create_parser("manage.py", "procedures")
    options = parser.parse_args(shlex.split(line))
    assert options.subcommand in SUBCOMMANDS


def test_the_doc_is_in_the_site_navigation():
    assert "cli.md" in (DOC.parents[1] / "mkdocs.yml").read_text()
