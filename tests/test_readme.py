"""The README's Quick start is a contract: one code block, two commands, the second run verbatim by CI."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    assert readme.startswith("# django-procedures\n")
    section = re.search(r"^## Quick start\n(.*?)(?=^## )", readme, re.S | re.M)
    assert section, "README.md needs a '## Quick start' section"
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", section.group(1), re.S | re.M)
    assert len(blocks) == 1, f"the Quick start must hold exactly one code block; found {len(blocks)}"
    return [line.strip() for line in blocks[0].splitlines() if line.strip()]


def test_quick_start_is_two_make_commands():
    assert quick_start_commands() == ["make demo", "make test"]


def test_ci_runs_the_second_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert quick_start_commands()[1] in [line.strip() for line in ci]
    assert "set -euo pipefail" in ci


def test_make_targets_exist():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo", "test", "test-django6", "lint", "clean"):
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"Makefile has no {target} target"
