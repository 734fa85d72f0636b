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


HOME = "https://github.com/django-procedures/django-procedures"
# Inline links and images, reference definitions, and HTML href/src attributes.
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)|^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)|(?:href|src)=[\"']([^\"']+)", re.M)


def readme_links() -> list[str]:
    return [next(g for g in m.groups() if g) for m in LINK.finditer((ROOT / "README.md").read_text())]


def test_readme_links_are_absolute_so_they_work_on_a_package_index_page():
    links = readme_links()
    assert any(link.startswith(f"{HOME}/blob/main/docs/") for link in links)
    relative = [link for link in links if not re.match(r"(https?|mailto):", link)]
    assert relative == [], f"README.md links relative to the checkout (broken on PyPI): {relative}; use {HOME}/..."


def test_readme_links_into_the_repository_name_files_that_exist():
    for link in readme_links():
        if link.startswith(f"{HOME}/"):
            path = re.sub(r"^(blob|tree)/main/", "", link.removeprefix(f"{HOME}/")).split("#")[0]
            assert (ROOT / path).exists(), f"README.md links to {link}, but there is no {path}"


def test_project_urls_point_at_the_repository():
    import tomllib

    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert set(urls) == {"Homepage", "Documentation", "Changelog", "Issues"}
    assert all(url.startswith(HOME) for url in urls.values())
    for url in (urls["Documentation"], urls["Changelog"]):
        assert (ROOT / url.removeprefix(f"{HOME}/blob/main/")).is_file(), url
