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


def test_readme_links_into_the_project_are_relative():
    # The repository HOME names does not exist: an absolute link to it is a dead link wherever it is read.
    links = readme_links()
    assert "docs/getting-started.md" in links
    absolute = [link for link in links if link.startswith(HOME)]
    assert absolute == [], f"README.md links to the project by absolute URLs: {absolute}; link its files relatively"


def test_docs_link_to_the_project_relatively():
    absolute = [f"{path.name}: {link}" for path in sorted((ROOT / "docs").glob("*.md"))
                for link in re.findall(r"\]\(\s*<?([^)\s>]+)", path.read_text()) if link.startswith(HOME)]
    assert absolute == []


def test_readme_links_into_the_repository_name_files_that_exist():
    for link in readme_links():
        if not re.match(r"(https?|mailto):|#", link):
            path = link.split("#")[0]
            assert (ROOT / path).exists(), f"README.md links to {link}, but there is no {path}"


def test_project_urls_point_at_the_repository():
    import tomllib

    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert set(urls) == {"Homepage", "Documentation", "Changelog", "Issues"}
    assert all(url.startswith(HOME) for url in urls.values())
    for url in (urls["Documentation"], urls["Changelog"]):
        assert (ROOT / url.removeprefix(f"{HOME}/blob/main/")).is_file(), url


def test_getting_started_lists_every_extra():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    page = (ROOT / "docs" / "getting-started.md").read_text()
    listed = set(re.findall(r"^- `([a-z0-9-]+)`: ", page.split("Extras:", 1)[1].split("\n\n", 2)[1], re.M))
    assert listed == set(extras)


def test_getting_started_shows_what_the_shell_prints_for_a_status():
    from django_procedures import RunStatus

    page = (ROOT / "docs" / "getting-started.md").read_text()
    shown = re.search(r">>> handle\.status\n(.*)\n", page).group(1)
    assert shown == repr(RunStatus.READY) and RunStatus.READY == "ready"
    assert f"{RunStatus.DONE!r}" in page.split(">>> handle.wait(timeout=30)\n", 1)[1].splitlines()[0]


def test_the_docs_index_links_every_page():
    index = (ROOT / "docs" / "index.md").read_text()
    pages = {path.name for path in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert {page for page in pages if f"]({page})" not in index} == set()
