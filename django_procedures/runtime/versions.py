"""A claim of a run written by an older version of its class: its state upgraded, its renamed steps found."""

from __future__ import annotations

from django_procedures.policy.state import copy_state, find_problem
from django_procedures.policy.versions import missing_step_text, resolve_step
from django_procedures.procedure import Procedure, StepSpec
from django_procedures.runtime import hooks
from django_procedures.runtime.running import Outcome, RunningClaim, error_text, log_extra, logger, trace_text
from django_procedures.store.db import own_connection_lost, session


def find_step(cls: type[Procedure], name: str) -> StepSpec | None:
    """The step a run stored at ``name`` resumes at (through ``cls.renamed_steps``), or None."""
    found = resolve_step(name, [s.name for s in cls.steps], cls.renamed_steps)
    return next((s for s in cls.steps if s.name == found), None)


def missing_step(procedure: Procedure, cls: type[Procedure], running: RunningClaim) -> Outcome:
    """Fail the run whose next step the class no longer has, for good but retryable by hand after a fix."""
    claim = running.claim
    return hooks.fail_now(procedure, cls, running,
                          missing_step_text(claim.step_name, claim.type_name, claim.version, cls.version))


def upgrade(procedure: Procedure, cls: type[Procedure], running: RunningClaim) -> Outcome | None:
    """Before anything runs: an older run's state through ``upgrade_state``, once per claim.

    The upgraded state becomes the claim's, and its next write records ``cls.version``
    (``claim.upgraded_to``). A hook that raises or returns no JSON object fails the run
    (retryable by hand, after a fix); that outcome is returned. None: go on.
    """
    claim = running.claim
    claim.upgraded_to = None
    if claim.version >= cls.version:
        return None
    before = session()  # so that own_connection_lost() can tell whose connection failed
    try:
        upgraded = procedure.upgrade_state(copy_state(claim.state), claim.version)
        if not isinstance(upgraded, dict):
            raise TypeError(f"it must return the state as a dict (a JSON object); got {type(upgraded).__name__}")
        problem = find_problem(upgraded)
        if problem:
            raise TypeError(f"the state it returned cannot be stored: {problem}")
    except BaseException as error:  # foreign code: fails the run, never the worker
        if own_connection_lost(error, before):
            raise  # not the hook's failure: the executor reconnects and runs the claim again
        message = (f"{cls.type_name}.upgrade_state(state, from_version={claim.version}) to version {cls.version} "
                   f"failed: {error_text(error)}; fix it, deploy, and retry the procedure")
        procedure.state = copy_state(claim.state)
        return hooks.fail_now(procedure, cls, running, message, trace_text())
    logger.info("procedure %s: state upgraded from version %d to %d", claim.id, claim.version, cls.version,
                extra=log_extra(claim))
    claim.state, claim.upgraded_to = upgraded, cls.version
    procedure.state = copy_state(upgraded)
    return None
