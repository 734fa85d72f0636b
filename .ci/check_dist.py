"""Check what the built sdist and wheel carry: the sdist the whole test suite, the wheel the package only."""

import sys
import tarfile
import zipfile
from pathlib import Path

SDIST_NEEDS = ["LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "MANIFEST.in", "mkdocs.yml", "Makefile",
               "manage.py",
               ".ci/run", "tests/conftest.py", "tests/runtime/processes.py", "tests/policy/schedule_tables.py",
               "testproject/settings.py", "testproject/testapp/procedures.py", "docs/writing-procedures.md",
               "benchmarks/run.py", "django_procedures/py.typed"]
WHEEL_NEEDS = ["django_procedures/__init__.py", "django_procedures/py.typed",
               "django_procedures/migrations/0001_initial.py"]


def main(dist: Path) -> None:
    (sdist,), (wheel,) = sorted(dist.glob("*.tar.gz")), sorted(dist.glob("*.whl"))
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    missing = [n for n in SDIST_NEEDS if n not in names]
    tests = sorted(p.as_posix() for p in Path("tests").rglob("*.py") if "__pycache__" not in p.parts)
    missing += [t for t in tests if t not in names]
    with zipfile.ZipFile(wheel) as whl:
        wheel_names = set(whl.namelist())
    missing += [f"wheel: {n}" for n in WHEEL_NEEDS if n not in wheel_names]
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in wheel_names):
        missing.append("wheel: LICENSE in .dist-info/licenses")
    if not any(n.startswith("django_procedures/templates/") for n in wheel_names):
        missing.append("wheel: django_procedures/templates/")
    stray = sorted(n for n in wheel_names if n.split("/")[0] in ("tests", "testproject", "benchmarks"))
    if missing or stray:
        sys.exit(f"missing from the distributions: {missing}\nin the wheel but not the package: {stray[:10]}")
    print(f"{sdist.name}: {len(names)} files, all {len(tests)} test modules; {wheel.name}: {len(wheel_names)} files")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
