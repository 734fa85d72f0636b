# django-procedures: the one entry point for setting up, the demo, the tests and CI.
#
#   make demo          set up .venv (Python 3.11), run the demo on a fresh SQLite database
#   make test          set up .venv, run the suite on PostgreSQL (with a coverage report), then on
#                      SQLite, then lint and the migrations check
#   make test-fast     the inner loop: SQLite, no PostgreSQL-only tests, worker processes, browser or soak
#   make check-wheel   build the wheel, install it into a clean virtualenv, migrate and run a procedure
#   make docs          build the documentation site into var/site (MkDocs, warnings are errors)
#   make test-django6  the PostgreSQL leg and the migrations check on Django 6.1 (.venv-django6, Python 3.12),
#                      without the benchmark smoke runs and the process tier of make test-pgbouncer
#   make test-pgbouncer  the process tier (worker subprocesses, the quick soak) with the workers behind PgBouncer
#                      in transaction mode (.ci/pgbouncer starts it on PGBOUNCER_URL's port); CI runs it on
#                      Django 6 (PGBOUNCER_VENV=.venv-django6)
#   make lint          ruff, then mypy (django-stubs) on django_procedures
#   make clean         remove virtualenvs, var/ and caches
#
# Variables (environment or command line):
#   DATABASE_URL             PostgreSQL for the tests (default postgres://postgres@127.0.0.1:5432/procedures;
#                            pytest-django creates and drops the test database, test_<name>)
#   PROCEDURES_TEST_DB_NAME  name of that test database, so two runs on one server do not collide
#   PYTEST_ARGS              extra pytest arguments, e.g. PYTEST_ARGS='-x -k lease'; tests run in random order
#                            (pytest-randomly): '-p no:randomly' for file order, '--randomly-seed=N' to repeat
#                            the order of a run that printed "Using --randomly-seed=N"
#   COVERAGE                 pytest-cov arguments of the PostgreSQL leg (COVERAGE= turns coverage off)
#   XDIST                    pytest-xdist arguments of the PostgreSQL legs (default '-n 2 --dist loadfile': two
#                            pytest processes, each with its own test database; XDIST= runs them in one)
#   PGBOUNCER_URL            the PgBouncer of make test-pgbouncer (default postgres://postgres@127.0.0.1:6432)
#   PGBOUNCER_VENV           the virtualenv of make test-pgbouncer (default .venv; .venv-django6 for Django 6)
#   PYTHON, PYTHON_DJANGO6   interpreters for the two virtualenvs (found on PATH or through pyenv)

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
MAKEFLAGS += --no-print-directory

# The first python<version> that runs: on PATH, else the newest pyenv install of that version.
find-python = $(shell { python$(1) -c 'import sys; print(sys.executable)' 2>/dev/null || true; \
	ls -d "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/$(1).*/bin/python$(1) 2>/dev/null | sort -V | tail -n1 \
	|| true; } | head -n1)
PYTHON ?= $(call find-python,3.11)
PYTHON_DJANGO6 ?= $(call find-python,3.12)

VENV := .venv
VENV6 := .venv-django6
DJANGO6_SPEC := django>=6.1,<6.2

PG_URL := $(or $(DATABASE_URL),postgres://postgres@127.0.0.1:5432/procedures)
SQLITE_TEST_URL := sqlite:///var/test.sqlite3
FAST_TEST_URL := sqlite:///var/test-fast.sqlite3
DEMO_URL := sqlite:///var/demo.sqlite3
DJANGO6_TEST_DB := $(if $(PROCEDURES_TEST_DB_NAME),$(PROCEDURES_TEST_DB_NAME)_django6,test_procedures_django6)
PYTEST_ARGS ?=
COVERAGE ?= --cov=django_procedures --cov-report=term:skip-covered
# Most of the PostgreSQL legs' time is worker processes waiting on each other: two pytest processes (a test
# file each at a time, each on its own test_<name>_gw<N> database) halve it on this 2-core machine.
XDIST ?= -n 2 --dist loadfile
# The process tests that make test-pgbouncer runs with its workers behind PgBouncer (every test in these files starts
# worker processes).
PGBOUNCER_FILES := tests/runtime/test_worker_processes.py tests/runtime/test_fault_processes.py \
	tests/runtime/test_lock_key_processes.py tests/runtime/test_tree_processes.py \
	tests/runtime/test_tree_crash_processes.py tests/runtime/test_schedule_fault_processes.py \
	tests/runtime/test_reconnect.py tests/runtime/test_pgbouncer_processes.py tests/runtime/test_cancel_race_processes.py \
	tests/runtime/test_limit_processes.py tests/test_soak.py
# The Django 6 leg leaves out the benchmark smoke runs (they drive the same code as on Django 5.2 for a minute, and
# the PostgreSQL leg runs them) and PGBOUNCER_FILES: CI runs those on Django 6 through PgBouncer
# (make test-pgbouncer PGBOUNCER_VENV=.venv-django6), so that each Django runs the process tier once.
DJANGO6_IGNORE ?= --ignore=tests/test_benchmarks.py $(addprefix --ignore=,$(PGBOUNCER_FILES))
# The fast tier leaves out what starts processes or a browser (the soak and the benchmarks start processes too).
FAST_ARGS := -m 'not subprocess and not browser'

# Shows a database URL without its password.
redact = $(shell printf '%s' '$(1)' | sed -E 's|(//[^:/@]*):[^@]*@|\1:***@|')
banner = if [ -t 1 ]; then printf '\n\033[1m==> %s\033[0m\n' "$(1)"; else printf '\n==> %s\n' "$(1)"; fi

.PHONY: help demo test test-fast test-postgres test-sqlite test-django6 test-pgbouncer lint check-migrations check-wheel docs \
	clean check-pg-url

help:
	@sed -n '2,26p' Makefile | sed 's/^# \{0,1\}//'

# -- virtualenvs (rebuilt when pyproject.toml changes) ----------------------------------------

# setuptools warns on every editable install of a flat layout that ./django_procedures shadows the package:
# here that is the point of an editable install.
EDITABLE_QUIET := PYTHONWARNINGS=ignore::UserWarning:setuptools.command.editable_wheel

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: no Python 3.11 found; install it or run make PYTHON=/path/to/python3.11" >&2; exit 1; }
	@test -x $(VENV)/bin/python || { echo "creating $(VENV) with $(PYTHON)"; "$(PYTHON)" -m venv $(VENV); }
	@echo "installing django-procedures and its dev dependencies into $(VENV)"
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(EDITABLE_QUIET) $(VENV)/bin/python -m pip install --quiet -e . --group dev
	@touch $@

$(VENV6)/.installed: pyproject.toml
	@test -n "$(PYTHON_DJANGO6)" || { echo "error: Django 6 needs Python 3.12 and none was found; install it (pyenv install 3.12) or run make PYTHON_DJANGO6=/path/to/python3.12" >&2; exit 1; }
	@test -x $(VENV6)/bin/python || { echo "creating $(VENV6) with $(PYTHON_DJANGO6)"; "$(PYTHON_DJANGO6)" -m venv $(VENV6); }
	@echo "installing django-procedures, its dev dependencies and $(DJANGO6_SPEC) into $(VENV6)"
	$(VENV6)/bin/python -m pip install --quiet --upgrade pip
	$(EDITABLE_QUIET) $(VENV6)/bin/python -m pip install --quiet -e . --group dev 'django>=6.0'
	@# django-celery-beat 2.9 (the latest) declares Django<6.1, so the resolver stops at 6.0: Django 6.1 goes
	@# in over it, and the Celery glue's tests check that beat works on it all the same.
	$(VENV6)/bin/python -m pip install --quiet --no-deps '$(DJANGO6_SPEC)'
	@$(VENV6)/bin/python -c 'import django; assert django.VERSION[:2] == (6, 1), django.get_version()'
	@touch $@

var:
	@mkdir -p var

# -- the demo ---------------------------------------------------------------------------------

demo: $(VENV)/.installed | var
	@rm -f var/demo.sqlite3 var/demo.sqlite3-wal var/demo.sqlite3-shm var/demo-worker.log
	@DATABASE_URL=$(DEMO_URL) $(VENV)/bin/python manage.py migrate --verbosity 0
	@DATABASE_URL=$(DEMO_URL) $(VENV)/bin/python manage.py procedures_demo

# -- tests ------------------------------------------------------------------------------------

test: test-postgres test-sqlite lint check-migrations
	@$(call banner,make test: PostgreSQL and SQLite legs passed; lint and migrations clean)

check-pg-url:
	@case '$(PG_URL)' in postgres://*|postgresql://*) ;; \
	 *) echo "error: the PostgreSQL leg needs DATABASE_URL=postgres://...; got $(call redact,$(PG_URL))" >&2; exit 2;; esac

test-postgres: $(VENV)/.installed check-pg-url | var
	@$(call banner,PostgreSQL leg: $(call redact,$(PG_URL)) · Django $$($(VENV)/bin/python -m django --version) · $$($(VENV)/bin/python -V))
	DATABASE_URL='$(PG_URL)' $(VENV)/bin/python -m pytest --create-db $(XDIST) $(COVERAGE) $(PYTEST_ARGS)

test-fast: $(VENV)/.installed | var
	@$(call banner,fast tier on SQLite: no PostgreSQL-only tests, worker processes, browser or soak)
	PROCEDURES_PROPERTY_EXAMPLES=25 DATABASE_URL=$(FAST_TEST_URL) $(VENV)/bin/python -m pytest $(FAST_ARGS) \
		$(PYTEST_ARGS)

test-sqlite: $(VENV)/.installed | var
	@$(call banner,SQLite leg: $(SQLITE_TEST_URL) (PostgreSQL-only tests are skipped) · Django $$($(VENV)/bin/python -m django --version) · $$($(VENV)/bin/python -V))
	DATABASE_URL=$(SQLITE_TEST_URL) $(VENV)/bin/python -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed
	@$(call banner,ruff check)
	$(VENV)/bin/ruff check .
	@$(call banner,mypy (django-stubs; [tool.mypy] in pyproject.toml))
	$(VENV)/bin/mypy

check-migrations: $(VENV)/.installed | var
	@$(call banner,migrations match the models (Django $$($(VENV)/bin/python -m django --version)))
	DATABASE_URL=$(SQLITE_TEST_URL) $(VENV)/bin/python manage.py makemigrations --check --dry-run

test-django6: $(VENV6)/.installed check-pg-url | var
	@$(call banner,PostgreSQL leg on Django 6: $(call redact,$(PG_URL)) test database $(DJANGO6_TEST_DB) · Django $$($(VENV6)/bin/python -m django --version) · $$($(VENV6)/bin/python -V))
	PROCEDURES_TEST_DB_NAME=$(DJANGO6_TEST_DB) DATABASE_URL='$(PG_URL)' $(VENV6)/bin/python -m pytest --create-db $(XDIST) $(DJANGO6_IGNORE) $(PYTEST_ARGS)
	@$(call banner,migrations match the models (Django $$($(VENV6)/bin/python -m django --version)))
	DATABASE_URL=$(SQLITE_TEST_URL) $(VENV6)/bin/python manage.py makemigrations --check --dry-run

# The workers are what must work behind PgBouncer: they go through it (and LISTEN on a direct alias), while the
# test process connects directly so that pytest-django can create and drop the test databases. CI runs the
# process tests of crashes, fencing and shutdown, trees, schedules and lost connections, and the quick soak
# through a PgBouncer of its own that it kills once; PGBOUNCER_TESTS='tests/runtime tests/tasks
# tests/test_soak.py -m subprocess' runs every test that starts workers (about 10 minutes on a loaded machine).
PGBOUNCER_URL ?= postgres://postgres@127.0.0.1:6432
# Tests whose workers run on a database of their own (a throwaway cluster, an unmigrated database) reach it
# directly, so they are left out (-k).
PGBOUNCER_TESTS ?= -m subprocess -k 'not carries_on and not postgresql_is_down and not unmigrated' $(PGBOUNCER_FILES)
# The virtualenv, so the Django, of make test-pgbouncer: .venv (Django 5.2), or .venv-django6 as CI runs it.
PGBOUNCER_VENV ?= $(VENV)

test-pgbouncer: $(PGBOUNCER_VENV)/.installed check-pg-url | var
	@PGBOUNCER_PORT=$$(printf '%s' '$(PGBOUNCER_URL)' | sed -E 's|.*:([0-9]+)/?$$|\1|') .ci/pgbouncer start
	@$(call banner,process tier through PgBouncer: workers on $(call redact,$(PGBOUNCER_URL)) · tests on $(call redact,$(PG_URL)) · Django $$($(PGBOUNCER_VENV)/bin/python -m django --version))
	PROCEDURES_TEST_POOLER_URL='$(PGBOUNCER_URL)' DATABASE_URL='$(PG_URL)' $(PGBOUNCER_VENV)/bin/python -m pytest \
		--create-db $(XDIST) $(PGBOUNCER_TESTS) $(PYTEST_ARGS)

# -- the published package ---------------------------------------------------------------------

WHEEL_VENV := var/wheel-venv

check-wheel: $(VENV)/.installed | var
	@$(call banner,build the wheel and the sdist; install the wheel into a clean virtualenv; migrate and run a procedure)
	rm -rf var/dist $(WHEEL_VENV)
	$(VENV)/bin/python -m build --outdir var/dist . >var/build.log 2>&1 || { cat var/build.log; exit 1; }
	$(VENV)/bin/python .ci/check_dist.py var/dist
	"$(PYTHON)" -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install --quiet "$$(ls var/dist/*.whl)[binary]"
	cd var && ../$(WHEEL_VENV)/bin/python ../.ci/wheel_smoke.py

docs: $(VENV)/.installed | var
	@$(call banner,documentation site with warnings as errors: var/site)
	$(VENV)/bin/mkdocs build --strict --quiet

# -- housekeeping -----------------------------------------------------------------------------

clean:
	rm -rf $(VENV) $(VENV6) var .pytest_cache .ruff_cache .hypothesis build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
