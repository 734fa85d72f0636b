"""OpenTelemetry with real ``procedures_worker`` processes: spans exported to a file, and no cost without it.

Each worker's OpenTelemetry set-up (or its absence) comes from a ``sitecustomize``
module put first on its ``PYTHONPATH``, as ``opentelemetry-instrument`` does.
"""

from __future__ import annotations

import json
import signal
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from django_procedures.models import ProcedureRun
from testproject.testapp.procedures import Refuses, ThreeSteps
from tests.runtime.processes import wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

EXPORT_TO_FILE = '''
import json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

class FileExporter(SpanExporter):
    def export(self, spans):
        with open({path!r}, "a") as out:
            for s in spans:
                out.write(json.dumps({{"name": s.name, "trace_id": s.context.trace_id, "span_id": s.context.span_id,
                                      "parent": s.parent.span_id if s.parent else None,
                                      "attributes": dict(s.attributes)}}) + "\\n")
        return SpanExportResult.SUCCESS

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
trace.set_tracer_provider(provider)
'''

WITHOUT_OPENTELEMETRY = '''
import atexit, json, sys

attempts = []

class NoOpenTelemetry:
    """As if opentelemetry were not installed; every attempt to import it is noted."""

    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            attempts.append(name)
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NoOpenTelemetry())

@atexit.register
def report():
    with open({path!r}, "w") as out:
        json.dump({{"attempts": attempts, "loaded": sorted(m for m in sys.modules if m.startswith("opentelemetry"))}},
                  out)
'''


def shim(tmp_path: Path, name: str, code: str, path: Path) -> dict[str, str]:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(textwrap.dedent(code.format(path=str(path))))
    return {"PYTHONPATH": f"{folder}:{Path(__file__).resolve().parents[2]}"}


def read_spans(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
    except FileNotFoundError:
        return []


def test_a_worker_process_exports_claim_and_step_spans_in_the_submitters_trace(workers, tmp_path):
    tracer = TracerProvider().get_tracer("tests")  # the submitter's own: never this process's global one
    with tracer.start_as_current_span("POST /orders") as request:
        done = ThreeSteps.submit({})
        refused = Refuses.submit({})
    spans_file = tmp_path / "spans.jsonl"
    w = workers.start("--burst", env=shim(tmp_path, "otel", EXPORT_TO_FILE, spans_file), lease_seconds=5)
    assert w.wait(60) == 0, w.describe()

    spans = read_spans(spans_file)
    submitter = request.get_span_context()
    assert {s["trace_id"] for s in spans} == {submitter.trace_id}
    claims = {s["attributes"]["procedures.id"]: s for s in spans if s["name"].startswith("claim ")}
    assert {pid: (s["name"], s["parent"], s["attributes"]["procedures.outcome"]) for pid, s in claims.items()} == {
        str(done.id): ("claim testapp.ThreeSteps", submitter.span_id, "completed"),
        str(refused.id): ("claim testapp.Refuses", submitter.span_id, "failed")}
    steps = sorted((s["name"], s["attributes"]["procedures.outcome"], s["attributes"]["procedures.attempt"],
                    s["parent"] == claims[s["attributes"]["procedures.id"]]["span_id"])
                   for s in spans if s["name"].startswith("step "))
    assert steps == [("step testapp.Refuses.check", "failed", 1, True),
                     ("step testapp.ThreeSteps.one", "done", 1, True),
                     ("step testapp.ThreeSteps.three", "done", 1, True),
                     ("step testapp.ThreeSteps.two", "done", 1, True)]


def test_without_opentelemetry_a_worker_never_even_tries_to_import_it(workers, tmp_path):
    tracer = TracerProvider().get_tracer("tests")
    with tracer.start_as_current_span("request"):
        handles = [ThreeSteps.submit({}) for _ in range(3)]  # their rows carry a trace context all the same
    assert all(ProcedureRun.objects.get(id=h.id).trace_context for h in handles)
    report = tmp_path / "imports.json"
    w = workers.start("--burst", env=shim(tmp_path, "no-otel", WITHOUT_OPENTELEMETRY, report), lease_seconds=5)
    assert w.wait(60) == 0, w.describe()

    assert set(ProcedureRun.objects.filter(id__in=[h.id for h in handles]).values_list("status", flat=True)) == {
        "done"}
    assert json.loads(report.read_text()) == {"attempts": [], "loaded": []}


def test_tracing_true_without_opentelemetry_stops_the_worker_saying_what_to_install(workers, tmp_path):
    w = workers.start(env=shim(tmp_path, "no-otel", WITHOUT_OPENTELEMETRY, tmp_path / "imports.json"),
                      procedures={"TRACING": True})
    try:
        assert w.wait(60) != 0
    finally:
        w.signal(signal.SIGTERM)
    assert "django_procedures.E016" in w.log() and "django-procedures[otel]" in w.log()


def test_spans_are_written_as_the_claims_end_not_only_at_exit(workers, tmp_path):
    """A long-lived worker: its spans reach the exporter while it runs."""
    ThreeSteps.submit({})
    spans_file = tmp_path / "spans.jsonl"
    w = workers.start(env=shim(tmp_path, "otel", EXPORT_TO_FILE, spans_file), lease_seconds=5)
    wait_for(lambda: any(s["name"] == "claim testapp.ThreeSteps" for s in read_spans(spans_file)), timeout=60,
             workers=workers, what="the claim span to be exported")
    w.signal(signal.SIGTERM)
    assert w.wait(30) == 0
