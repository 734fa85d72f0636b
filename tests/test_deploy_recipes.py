"""The deploy recipes in docs/deploy/ and the runbook: they parse, their numbers agree, their commands are real.

Every ``manage.py …`` command line in them is given to the real argument parser of that command. Lines of
``manage.py procedures …`` (the operator CLI) are checked once that command is installed, skipped before.
"""

from __future__ import annotations

import configparser
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import get_commands, load_command_class
from django.core.management.base import CommandError

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "docs" / "deploy"
RUNBOOK = ROOT / "docs" / "operating.md"
DEPLOYING = ROOT / "docs" / "deploying.md"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
YAML_FILES = sorted([*DEPLOY.rglob("*.yml"), *DEPLOY.rglob("*.yaml")])
SHELL_OPERATORS = {"&&", "||", ";", "|", ">", ">>", "2>&1", "&"}


# -- finding the command lines ------------------------------------------------------------------------------


def _backticked(text: str) -> Iterator[str]:
    yield from (m for m in re.findall(r"`([^`]*manage\.py[^`]*)`", text))


def _yaml_commands(node: Any) -> Iterator[list[str] | str]:
    if isinstance(node, dict):
        for value in node.values():
            yield from _yaml_commands(value)
    elif isinstance(node, list):
        if node and all(isinstance(v, str) for v in node) and any(v.endswith("manage.py") for v in node):
            yield node
        else:
            for value in node:
                yield from _yaml_commands(value)
    elif isinstance(node, str) and "manage.py" in node:
        yield from _backticked(node) if "`" in node else [node]  # prose (an annotation) quotes its commands


def snippets(path: Path) -> Iterator[list[str] | str]:
    """Every command line naming ``manage.py`` in ``path``: as argv lists (YAML exec form) or shell text."""
    text = path.read_text()
    if path.suffix == ".md":
        fenced = False
        pending = ""
        for line in text.splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if not fenced:
                yield from _backticked(line)
                continue
            line = pending + line.strip().removeprefix("$ ")
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            pending = ""
            if "manage.py" in line:
                yield line
        return
    if path.suffix in (".yml", ".yaml"):
        for document in yaml.safe_load_all(text):
            yield from _yaml_commands(document)
        for line in text.splitlines():
            if line.lstrip().startswith("#"):
                yield from _backticked(line)
        return
    for line in text.splitlines():  # systemd units, INI files
        stripped = line.strip()
        if stripped.startswith(("#", ";")):
            yield from _backticked(stripped)
        elif "manage.py" in stripped and "=" in stripped:
            yield stripped.split("=", 1)[1].replace("%i", "1")  # a template unit's instance: "1"


def manage_py_commands(snippet: list[str] | str) -> list[list[str]]:
    """``[name, *args]`` of each ``manage.py`` invocation in the snippet (shell operators end one)."""
    tokens = snippet if isinstance(snippet, list) else shlex.split(snippet, comments=True)
    found = []
    for i, token in enumerate(tokens):
        if token.endswith("manage.py"):
            args = []
            for t in tokens[i + 1:]:
                if t in SHELL_OPERATORS:
                    break
                args.append(t)
            if args:  # a bare mention of manage.py names no command
                found.append(args)
    return found


def all_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in [*sorted(DEPLOY.rglob("*")), RUNBOOK, DEPLOYING]:
        if path.is_file() and path.suffix in (".md", ".yml", ".yaml", ".service", ".ini"):
            for snippet in snippets(path):
                for argv in manage_py_commands(snippet):
                    found.append((f"{path.relative_to(ROOT)}: {' '.join(argv)}", argv))
    return found


COMMANDS = all_commands()


def test_the_recipes_and_the_runbook_name_commands():
    names = {argv[0] for _, argv in COMMANDS}
    assert {"procedures_worker", "procedures_beat_setup", "migrate", "procedures"} <= names
    where = {w.split(":")[0] for w, _ in COMMANDS}
    assert {"docs/operating.md", "docs/deploy/docker-compose.yml", "docs/deploy/kubernetes/workers.yaml",
            "docs/deploy/systemd/procedures-worker@.service"} <= where


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_manage_py_command_line_is_accepted_by_its_parser(where, argv):
    name, args = argv[0], argv[1:]
    commands = get_commands()
    if name not in commands:
        if name == "procedures":  # the operator CLI, built beside this: checked once it is installed
            pytest.skip("manage.py procedures is not installed yet")
        pytest.fail(f"{where}: no management command {name!r}")
    command = load_command_class(commands[name], name)
    parser = command.create_parser("manage.py", name)
    try:
        parser.parse_args(args)
    except (CommandError, SystemExit) as error:
        pytest.fail(f"{where}: the parser of {name} refuses it: {error}")


# -- the files parse, and their numbers agree ---------------------------------------------------------------


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def worker_argv(where_prefix: str) -> list[list[str]]:
    return [argv for where, argv in COMMANDS if where.startswith(where_prefix) and argv[0] == "procedures_worker"]


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string(path.read_text())
    return parser


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_systemd_units_parse_and_stop_with_sigterm_after_the_shutdown_timeout(path):
    parsed = unit(path)
    assert {"Unit", "Service", "Install"} <= set(parsed.sections())
    service = parsed["Service"]
    assert service["ExecStart"] and service["KillSignal"] == "SIGTERM"
    assert service["Restart"] == "always"
    if "procedures_worker" in service["ExecStart"]:
        (argv,) = manage_py_commands(service["ExecStart"].replace("%i", "1"))
        assert float(service["TimeoutStopSec"]) > float(option(argv, "--shutdown-timeout"))


def test_there_are_units_for_the_worker_and_celery_beat():
    starts = {p.name: unit(p)["Service"]["ExecStart"] for p in UNITS}
    assert "procedures_worker" in starts["procedures-worker@.service"]
    assert " beat " in starts["procedures-beat.service"]


def test_pgbouncer_ini_parses_and_has_what_the_worker_needs():
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string((DEPLOY / "pgbouncer" / "pgbouncer.ini").read_text())
    bouncer = parser["pgbouncer"]
    assert parser["databases"]["mysite"].startswith("host=postgres ")
    # docs/scaling.md, "PgBouncer settings that work", and the settings the tests run behind (.ci/pgbouncer.ini)
    assert bouncer["pool_mode"] == "transaction"
    assert bouncer["server_reset_query"] == ""
    assert bouncer["server_check_delay"] == "0"
    assert set(bouncer["ignore_startup_parameters"].split(",")) >= {"extra_float_digits", "options"}
    # Not shorter than IDLE_IN_TRANSACTION_TIMEOUT_SECONDS' default: twice the default lease.
    from django_procedures.conf import DEFAULTS
    assert float(bouncer["idle_transaction_timeout"]) >= 2 * DEFAULTS["LEASE_SECONDS"]
    tested = configparser.ConfigParser(interpolation=None)
    tested.read_string((ROOT / ".ci" / "pgbouncer.ini").read_text())
    for key in ("pool_mode", "server_reset_query", "server_check_delay", "ignore_startup_parameters"):
        assert bouncer[key] == tested["pgbouncer"][key], key


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: p.name)
def test_yaml_files_parse(path):
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert documents


def _seconds(text: str) -> float:
    value, unit_ = re.fullmatch(r"(\d+(?:\.\d+)?)(s|m)", text).groups()
    return float(value) * (60 if unit_ == "m" else 1)


def test_compose_runs_postgres_pgbouncer_web_two_workers_and_beat_with_grace_past_the_timeout():
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "pgbouncer", "web", "beat"} <= set(services)
    workers = {name: s for name, s in services.items() if "procedures_worker" in s.get("command", [])}
    assert len(workers) == 2
    for service in workers.values():
        argv = manage_py_commands(service["command"])[0]
        assert _seconds(service["stop_grace_period"]) > float(option(argv, "--shutdown-timeout"))
        assert service["stop_signal"] == "SIGTERM"
        assert f"127.0.0.1:{option(argv, '--metrics-port')}/healthz" in " ".join(service["healthcheck"]["test"])
        assert "pgbouncer:6432" in service["environment"]["DATABASE_URL"]
    assert "beat" in services["beat"]["command"]


def test_kubernetes_worker_has_probes_grace_a_budget_and_an_autoscaler_on_queue_depth():
    documents = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / "workers.yaml").read_text())}
    deployment = documents["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    argv = manage_py_commands(container["command"])[0]
    assert pod["terminationGracePeriodSeconds"] > float(option(argv, "--shutdown-timeout"))
    assert option(argv, "--metrics-host") == "0.0.0.0"  # the kubelet probes the pod's address
    (port,) = container["ports"]
    assert port["containerPort"] == int(option(argv, "--metrics-port"))
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    labels = deployment["spec"]["selector"]["matchLabels"]
    assert documents["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == labels
    hpa = documents["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    (metric,) = hpa["metrics"]
    assert metric["external"]["metric"]["name"] == "django_procedures_procedures"
    assert metric["external"]["metric"]["selector"]["matchLabels"]["status"] == "ready"


# -- metric names: only ones the code exports ---------------------------------------------------------------


def _series(name: str, kind: str) -> set[str]:
    return {"counter": {f"{name}_total", f"{name}_created"},
            "histogram": {f"{name}_bucket", f"{name}_sum", f"{name}_count", f"{name}_created"},
            }.get(kind, {name})


@pytest.fixture
def exported(db) -> dict[str, set[str]]:
    """Series name -> label names, from running the worker's and the web process's collectors."""
    pytest.importorskip("prometheus_client")
    from types import SimpleNamespace

    from django.utils import timezone

    from django_procedures.contrib.prometheus.views import DatabaseCollector
    from django_procedures.runtime.metrics import WorkerMetrics

    metrics = WorkerMetrics(lambda: 0)
    now = timezone.now()
    claim = SimpleNamespace(type_name="t", run_at=now)
    metrics.claimed([claim])
    metrics.step_ended(claim, SimpleNamespace(started_at=now, finished_at=now), "done", None)
    metrics.outcome(SimpleNamespace(claim=claim), "completed")
    families = [*metrics.registry.collect(), *DatabaseCollector().collect()]
    found: dict[str, set[str]] = {}
    for family in families:
        for name in _series(family.name, family.type):
            found.setdefault(name, set())
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(set(sample.labels) - {"le"})
    return found


def expressions() -> list[tuple[str, str]]:
    found = []
    for group in yaml.safe_load((DEPLOY / "alerts.yml").read_text())["groups"]:
        found += [(f"alerts.yml {r['alert']}", r["expr"]) for r in group["rules"]]
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        found += [(f"dashboard {panel['title']}", t["expr"]) for t in panel.get("targets", [])]
    found += [(f"dashboard variable {v['name']}", v["query"]["query"]) for v in dashboard["templating"]["list"]
              if isinstance(v.get("query"), dict)]
    return found


def test_every_metric_in_the_dashboard_and_the_alerts_is_exported(exported):
    seen = set()
    for where, expr in expressions():
        names = re.findall(r"\b(django_procedures_\w+)", expr)
        assert names, f"{where}: no django_procedures metric in {expr!r}"
        for name in names:
            assert name in exported, f"{where}: {name} is not a metric the code exports"
            seen.add(name)
        for name, matchers in re.findall(r"\b(django_procedures_\w+)\{([^}]*)\}", expr):
            labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
            if exported[name]:  # the label names are known from a sample
                assert labels <= exported[name], f"{where}: {name} has no label {labels - exported[name]}"
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), where
    # What the brief asks the dashboard and the alerts to show
    assert {"django_procedures_procedures_finished_total", "django_procedures_steps_total",
            "django_procedures_step_duration_seconds_bucket", "django_procedures_procedures",
            "django_procedures_oldest_due_seconds", "django_procedures_workers_alive",
            "django_procedures_leases_lost_total", "django_procedures_schedule_lag_seconds",
            "django_procedures_limit_in_use", "django_procedures_limit_max",
            "django_procedures_claims_deferred_total"} <= seen


def test_the_limit_alert_needs_a_full_limit_and_deferred_claims_for_a_while():
    """A limit at its max for long with work deferred (issue 30): both halves, joined per limit."""
    (rule,) = [r for group in yaml.safe_load((DEPLOY / "alerts.yml").read_text())["groups"]
               for r in group["rules"] if r["alert"] == "ProceduresLimitSaturated"]
    expr = " ".join(rule["expr"].split())
    assert "max by (limit) (django_procedures_limit_in_use) >= max by (limit) (django_procedures_limit_max)" in expr
    assert "and on (limit)" in expr and "rate(django_procedures_claims_deferred_total[" in expr
    assert rule["for"] == "15m" and "{{ $labels.limit }}" in rule["annotations"]["summary"]


DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def test_the_alert_rules_pass_a_schema_check():
    document = yaml.safe_load((DEPLOY / "alerts.yml").read_text())
    assert set(document) == {"groups"}
    names = set()
    alerts = set()
    for group in document["groups"]:
        assert set(group) <= {"name", "interval", "limit", "rules"} and isinstance(group["name"], str)
        assert group["name"] not in names
        names.add(group["name"])
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
            assert ("alert" in rule) != ("record" in rule)
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            if "for" in rule:
                assert DURATION.match(rule["for"]), rule["for"]
            for key in ("labels", "annotations"):
                assert all(isinstance(k, str) and isinstance(v, str) for k, v in rule.get(key, {}).items())
            assert rule["labels"]["severity"] in ("critical", "warning")
            assert {"summary", "description"} <= set(rule["annotations"])
            alerts.add(rule["alert"])
    assert {"ProceduresNoLiveWorker", "ProceduresOldestReadyTooOld", "ProceduresFailureRatioHigh",
            "ProceduresLeasesLost", "ProceduresScheduleLag"} <= alerts


def test_the_dashboard_is_grafana_json_with_unique_panel_ids():
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] and dashboard["schemaVersion"] >= 36
    for panel in dashboard["panels"]:
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"
