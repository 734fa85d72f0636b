"""OpenTelemetry spans of an in-process worker: exported to memory by a tracer provider of the test's own.

The provider is never set as the process's global one (OpenTelemetry allows
that once per process); ``trace.get_tracer_provider`` is pointed at it for the
test instead, which is what the worker reads when it starts.
"""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from django_procedures import Procedure, RetryPolicy, step
from django_procedures.models import ProcedureRun
from django_procedures.runtime import observe, tracing
from django_procedures.runtime.worker import WorkerRuntime, resolve_config
from django_procedures.testing import isolated_registry
from testproject.testapp import tasks
from testproject.testapp.procedures import Parent, Refuses, ThreeSteps

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

QUIET = {"LISTEN_NOTIFY": False, "BURST_WAIT_SECONDS": 0}


@pytest.fixture
def exported(monkeypatch, settings):
    """Spans the worker exports, with a provider the worker finds as the process's own."""
    settings.PROCEDURES = QUIET
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    exporter.tracer = provider.get_tracer("tests")
    yield exporter
    provider.shutdown()


def run_worker() -> None:
    WorkerRuntime(resolve_config(concurrency=1, burst=True, lease_seconds=10, shutdown_timeout=5)).run()


def by_name(exporter):
    return {span.name: span for span in exporter.get_finished_spans()}


def test_claim_and_step_spans_join_the_trace_that_submitted_the_procedure(exported):
    with exported.tracer.start_as_current_span("POST /orders") as request:
        handle = ThreeSteps.submit({})
    stored = ProcedureRun.objects.get(id=handle.id).trace_context
    assert stored["traceparent"].split("-")[1] == f"{request.get_span_context().trace_id:032x}"

    run_worker()

    spans = by_name(exported)
    claim = spans["claim testapp.ThreeSteps"]
    assert claim.context.trace_id == request.get_span_context().trace_id
    assert claim.parent.span_id == request.get_span_context().span_id
    assert claim.kind == trace.SpanKind.CONSUMER
    assert {k: claim.attributes[k] for k in ("procedures.type", "procedures.id", "procedures.step",
                                              "procedures.attempt", "procedures.outcome")} == {
        "procedures.type": "testapp.ThreeSteps", "procedures.id": str(handle.id), "procedures.step": "one",
        "procedures.attempt": 1, "procedures.outcome": "completed"}
    for name in ("one", "two", "three"):
        step = spans[f"step testapp.ThreeSteps.{name}"]
        assert step.parent.span_id == claim.context.span_id and step.context.trace_id == claim.context.trace_id
        assert (step.attributes["procedures.step"], step.attributes["procedures.attempt"],
                step.attributes["procedures.outcome"], step.attributes["procedures.id"]) == (
            name, 1, "done", str(handle.id))
        assert claim.start_time <= step.start_time <= step.end_time <= claim.end_time
    assert len(spans) == 5  # the request, the claim and three steps


def test_a_failed_step_is_an_error_span_and_the_claim_says_how_it_ended(exported):
    with exported.tracer.start_as_current_span("request"):
        handle = Refuses.submit({})
    run_worker()

    spans = by_name(exported)
    step = spans["step testapp.Refuses.check"]
    assert step.attributes["procedures.outcome"] == "failed"
    assert step.status.status_code == trace.StatusCode.ERROR
    assert "the tenant does not exist" in step.status.description
    claim = spans["claim testapp.Refuses"]
    assert (claim.attributes["procedures.outcome"], claim.status.status_code) == ("failed", trace.StatusCode.ERROR)
    assert ProcedureRun.objects.get(id=handle.id).status == "failed"


def test_children_submitted_by_a_step_are_spans_under_their_parents_claim(exported):
    with exported.tracer.start_as_current_span("request") as request:
        Parent.submit({"fanout": 2})
    run_worker()

    spans = exported.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {request.get_span_context().trace_id}  # one trace, the tree
    parent_claims = [s for s in spans if s.name == "claim testapp.Parent"]
    first = min(parent_claims, key=lambda s: s.start_time)  # spawned the children
    leaves = [s for s in spans if s.name == "claim testapp.Leaf"]
    assert len(leaves) == 2 and {s.parent.span_id for s in leaves} == {first.context.span_id}


def test_spans_a_step_starts_are_children_of_its_claim_span(exported):
    with isolated_registry():

        class ChargesACard(Procedure):
            type_name = "tests.ChargesACard"

            @step
            def charge(self, ctx):
                with trace.get_tracer("the application").start_as_current_span("POST /charges"):
                    pass

        ChargesACard.submit({})
        run_worker()

    spans = by_name(exported)
    assert spans["POST /charges"].parent.span_id == spans["claim tests.ChargesACard"].context.span_id


def test_each_claim_of_a_retried_procedure_is_a_child_of_the_submitters_span(exported):
    with isolated_registry():

        class FailsOnce(Procedure):
            type_name = "tests.FailsOnce"
            retry = RetryPolicy(max_attempts=2, initial_delay=0.0, jitter=0.0)

            @step
            def work(self, ctx):
                if ctx.attempt == 1:
                    raise RuntimeError("the first attempt fails")

        with exported.tracer.start_as_current_span("request") as request:
            FailsOnce.submit({})
        run_worker()

    spans = exported.get_finished_spans()
    claims = sorted((s for s in spans if s.name == "claim tests.FailsOnce"), key=lambda s: s.start_time)
    assert [(c.attributes["procedures.attempt"], c.attributes["procedures.outcome"], c.parent.span_id)
            for c in claims] == [(1, "retried", request.get_span_context().span_id),
                                 (2, "completed", request.get_span_context().span_id)]
    steps = sorted((s for s in spans if s.name == "step tests.FailsOnce.work"), key=lambda s: s.start_time)
    assert [(s.attributes["procedures.attempt"], s.attributes["procedures.outcome"], s.parent.span_id)
            for s in steps] == [(1, "failed", claims[0].context.span_id), (2, "done", claims[1].context.span_id)]


def test_a_procedure_submitted_outside_any_span_starts_a_trace_of_its_own(exported):
    handle = ThreeSteps.submit({})
    assert ProcedureRun.objects.get(id=handle.id).trace_context is None
    run_worker()

    claim = by_name(exported)["claim testapp.ThreeSteps"]
    assert claim.parent is None


def test_a_task_is_traced_like_any_procedure(exported):
    with exported.tracer.start_as_current_span("enqueue") as request:
        result = tasks.add.enqueue(2, 3)
    run_worker()

    (claim,) = [s for s in exported.get_finished_spans() if s.name.startswith("claim ")]
    assert claim.parent.span_id == request.get_span_context().span_id
    assert claim.attributes["procedures.id"] == str(result.id)
    assert claim.attributes["procedures.outcome"] == "completed"
    steps = [s for s in exported.get_finished_spans() if s.name.startswith("step ")]
    assert steps and all(s.parent.span_id == claim.context.span_id for s in steps)


def test_tracing_false_turns_it_off_at_submit_and_in_the_worker(exported, settings):
    settings.PROCEDURES = {**QUIET, "TRACING": False}
    with exported.tracer.start_as_current_span("request"):
        handle = ThreeSteps.submit({})
    assert ProcedureRun.objects.get(id=handle.id).trace_context is None
    run_worker()
    assert [s.name for s in exported.get_finished_spans()] == ["request"]


def test_without_a_tracer_provider_the_worker_does_no_tracing_work(monkeypatch, settings):
    """OpenTelemetry imported (this test process has it) but no provider set: no observer, no hook does anything."""
    settings.PROCEDURES = QUIET
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    emitted = []
    monkeypatch.setattr(observe, "_emit", lambda *args: emitted.append(args))
    looked_up = []
    real_current_span = trace.get_current_span
    monkeypatch.setattr(trace, "get_current_span", lambda *a: looked_up.append(a) or real_current_span(*a))
    handle = ThreeSteps.submit({})
    submitted_lookups = len(looked_up)

    assert tracing.tracer_provider() is None
    run_worker()

    assert ProcedureRun.objects.get(id=handle.id).status == "done"
    assert ProcedureRun.objects.get(id=handle.id).trace_context is None
    assert emitted == [] and observe.observers == []
    assert len(looked_up) == submitted_lookups  # the worker never asked OpenTelemetry for anything


def test_tracing_true_without_a_tracer_provider_says_so_when_the_worker_starts(settings, caplog):
    settings.PROCEDURES = {**QUIET, "TRACING": True}
    assert tracing.tracer_provider() is None
    assert "no OpenTelemetry tracer provider is set" in caplog.text
