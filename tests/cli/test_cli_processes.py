"""The real command line: ``python manage.py procedures ...`` exit codes, stderr lines, JSON, the TTY prompt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from django_procedures.models import ProcedureRun
from testproject.testapp.procedures import ThreeSteps
from tests.cli.helpers import shell
from tests.runtime.processes import MANAGE, ROOT, worker_database_env

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("args", [[], ["nope"], ["list", "--status", "bogus"], ["list", "--since", "yesterday"],
                                  ["retry"], ["cancel"], ["show"], ["schedules"], ["stats", "--window", "0"],
                                  ["retry", "--failed", str(uuid.uuid4())]])
def test_bad_usage_exits_2_with_the_usage_line(args):
    result = shell(*args)
    assert result.code == 2, result
    assert result.err.startswith("usage: manage.py procedures")
    assert "Traceback" not in result.err


@pytest.mark.parametrize("args", [["show", "not-an-id"], ["show", str(uuid.uuid4())], ["retry", str(uuid.uuid4())],
                                  ["cancel", "12"], ["list", "--type", "nope.Nope"],
                                  ["schedules", "pause", "nope"]])
def test_refusals_exit_1_with_one_line(args):
    result = shell(*args)
    assert result.code == 1, result
    assert len(result.err.strip().splitlines()) == 1
    assert result.out == ""


def test_json_is_one_document_and_actions_change_rows():
    ids = [ThreeSteps.submit({}).id for _ in range(2)]
    listed = shell("list", "--json")
    assert listed.code == 0
    assert {p["id"] for p in json.loads(listed.out)["procedures"]} == set(map(str, ids))
    assert json.loads(shell("show", str(ids[0]), "--json").out)["procedure"]["id"] == str(ids[0])
    assert json.loads(shell("stats", "--json").out)["unfinished"][0]["count"] == 2
    assert json.loads(shell("workers", "--json").out) == {"workers": []}
    dry = shell("cancel", *map(str, ids), "--dry-run", "--json")
    assert dry.code == 0 and len(json.loads(dry.out)["would_cancel"]) == 2
    assert set(ProcedureRun.objects.values_list("status", flat=True)) == {"ready"}
    done = shell("cancel", *map(str, ids))
    assert done.code == 0 and "cancelled 2 procedures" in done.out
    assert set(ProcedureRun.objects.values_list("status", flat=True)) == {"cancelled"}


def test_more_than_100_rows_without_a_terminal_refuse_and_say_pass_yes():
    for _ in range(101):
        ThreeSteps.submit({})
    result = shell("cancel", "--status", "ready")
    assert result.code == 1 and "pass --yes" in result.err
    assert ProcedureRun.objects.filter(status="ready").count() == 101


@pytest.mark.parametrize(("answer", "code", "status"), [(b"yes\n", 0, "cancelled"), (b"n\n", 1, "ready")])
def test_more_than_100_rows_ask_on_a_terminal(answer, code, status):
    for _ in range(101):
        ThreeSteps.submit({})
    primary, secondary = os.openpty()
    try:
        os.write(primary, answer)
        result = shell("cancel", "--status", "ready", stdin=secondary)
    finally:
        os.close(primary)
        os.close(secondary)
    assert result.code == code, result
    assert "This will cancel 101 procedures" in result.err
    assert set(ProcedureRun.objects.values_list("status", flat=True)) == {status}


def test_the_old_procedures_schedules_command_still_works():
    environ = {**os.environ, **worker_database_env()[0], "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    done = subprocess.run([sys.executable, str(MANAGE), "procedures_schedules"], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "no schedules\n"
