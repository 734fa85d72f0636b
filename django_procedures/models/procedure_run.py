"""``ProcedureRun``: one row per procedure, written only by ``django_procedures.store``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import Q
from model_utils.fields import AutoCreatedField

from django_procedures.models.readonly import ReadOnlyQuerySet, StoreWritten, WriterQuerySet
from django_procedures.policy.ids import new_id
from django_procedures.policy.state import StateEncoder
from django_procedures.policy.status import CLAIMABLE, FINAL, LEASED, UNSUCCESSFUL, RunStatus
from django_procedures.policy.waiting import WaitingFor

STATUS_CHOICES = [(s.value, s.value.replace("_", " ")) for s in RunStatus]


class _RunQueries:
    """The named selections of runs, for readers (``objects``) and the store (``_writer``) alike."""

    def claimable(self, now: datetime) -> Any:
        """Rows a claim may pick at ``now``, in claim order (matches ``procedures_claim_idx``)."""
        return self.filter(status__in=CLAIMABLE, run_at__lte=now).order_by("-priority", "run_at")  # type: ignore[attr-defined]

    def pending(self) -> Any:
        """Ready or retrying, due or not."""
        return self.filter(status__in=CLAIMABLE)  # type: ignore[attr-defined]

    def unfinished(self) -> Any:
        return self.exclude(status__in=FINAL)  # type: ignore[attr-defined]


class ProcedureRunQuerySet(_RunQueries, ReadOnlyQuerySet):
    """What ``ProcedureRun.objects`` returns: reads only (see :mod:`django_procedures.models.readonly`)."""


class _WritableRunQuerySet(_RunQueries, WriterQuerySet):
    pass


class ProcedureRun(StoreWritten):
    """A procedure: its type, state, position, lease and outcome."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)  # time-ordered: policy/ids.py
    type_name = models.CharField(max_length=255)
    state = models.JSONField(default=dict, encoder=StateEncoder)
    status = models.CharField(max_length=20, choices=STATUS_CHOICES, default=RunStatus.READY)

    # Position: `step` steps are committed; `step_name` is the next one to run.
    step = models.PositiveIntegerField(default=0)
    step_name = models.CharField(max_length=255, blank=True)
    step_started_at = models.DateTimeField(null=True, blank=True)
    # The class's ``version`` the state was last written by: workers whose class is older leave the run alone.
    version = models.PositiveIntegerField(default=1, db_default=1)
    # `attempt` numbers the next try of `step_name`; `failures` and `lost` are its two budgets.
    attempt = models.PositiveIntegerField(default=1)
    failures = models.PositiveIntegerField(default=0)
    lost = models.PositiveIntegerField(default=0)
    # Set (fenced) just before a non-idempotent step starts, cleared by its checkpoint.
    in_unsafe_step = models.BooleanField(default=False)

    # Indexed by partial indexes below: most procedures have no parent, and every index entry is rewritten
    # at each status change.
    # These two and the keys of Step, Lease and KeyRequest to a run are not enforced by PostgreSQL: its per-row
    # checks were two thirds of a prune's CPU and took a share lock on the run at every step, claim and child
    # insert. Every such row is written by a statement fenced on its run (or its parent) being unfinished and
    # locked, and runs are deleted whole trees at a time (docs/scaling.md, "Foreign keys").
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children",
                               db_index=False, db_constraint=False)
    root = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="descendants",
                             db_index=False, db_constraint=False)
    depth = models.PositiveIntegerField(default=0)
    # A parent: how many children of its last suspension are unfinished, and how many suspensions so far.
    pending_children = models.PositiveIntegerField(default=0)
    suspension = models.PositiveIntegerField(default=0)
    # A child: the parent's suspension that spawned it, and whether the parent handled its failure.
    spawned_in = models.PositiveIntegerField(default=0)
    position = models.PositiveIntegerField(default=0)  # among the children of that suspension, in given order
    failure_handled = models.BooleanField(default=False)

    # A `waiting` run's one wait ("children", "timer" or "event"; "" otherwise) and when a timer falls due.
    waiting_for = models.CharField(max_length=10, blank=True, default="", db_default="")
    wake_at = models.DateTimeField(null=True, blank=True)
    # The event names a run waiting for events waits for (``Status.wait_for_event``); NULL otherwise.
    waiting_events = models.JSONField(null=True, blank=True)

    # Lock keys as [[name, mode], ...], computed by lock_keys() at submit; held from the first claim on.
    lock_keys = models.JSONField(default=list, blank=True)
    keys_held = models.BooleanField(default=False)
    waiting_for_keys = models.BooleanField(default=False)
    # Flow-control limits as [[name, kind, amount, per_seconds], ...], computed by limits() at submit and at
    # each checkpoint; NULL (most runs): unlimited, claimed by the claim's fast path.
    limits = models.JSONField(null=True, blank=True)

    # Set when a permanent failure started the rollback; the rollback's own error, if it failed too.
    in_rollback = models.BooleanField(default=False)
    rollback_error = models.TextField(blank=True)
    queue = models.CharField(max_length=100, default="default")
    priority = models.IntegerField(default=0)
    # NULL, not "", for "no key": the partial unique constraint covers only real keys.
    key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    run_at = models.DateTimeField()

    lease_token = models.BigIntegerField(default=0)
    lease_owner = models.CharField(max_length=255, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    # No index of its own: procedures_schedule_idx (and the one-run-per-tick constraint) lead with it.
    schedule = models.ForeignKey("django_procedures.Schedule", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="procedure_runs", db_index=False)
    tick_at = models.DateTimeField(null=True, blank=True, help_text="The schedule tick this run stands for.")

    output = models.JSONField(null=True, blank=True, encoder=StateEncoder)
    error = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    failed_step = models.CharField(max_length=255, blank=True)
    failure_can_retry = models.BooleanField(default=False)

    created_at = AutoCreatedField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    retried_at = models.DateTimeField(null=True, blank=True)
    retried_by = models.CharField(max_length=255, blank=True)
    # Set by a handle.wait() that listens: only then does the final transition NOTIFY (migration 0005).
    awaited = models.BooleanField(default=False)
    manual_retries = models.PositiveIntegerField(default=0)

    # ctx.progress(): {"done", "total", "note"} as last written (outside the step's transaction, fenced,
    # throttled), and when, on the recorded clock.
    progress = models.JSONField(null=True, blank=True)
    progress_updated_at = models.DateTimeField(null=True, blank=True)
    # The W3C trace context (``{"traceparent": ..., "tracestate": ...}``) of the span current at submit, when
    # OpenTelemetry is in use; the worker's claim spans are its children (see runtime/tracing.py).
    trace_context = models.JSONField(null=True, blank=True)
    # The state as submitted, kept for a re-run from the first step (``state`` holds the last checkpoint's).
    submitted_state = models.JSONField(null=True, blank=True, encoder=StateEncoder)
    # A re-run (``ProcedureHandle.rerun``): the final run it started again from one of its checkpoints. Not
    # enforced by PostgreSQL, like ``parent`` (docs/scaling.md, "Foreign keys"); a pruned original leaves it
    # dangling, which the pages show as "pruned".
    rerun_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.DO_NOTHING, related_name="reruns",
                                 db_index=False, db_constraint=False)

    objects = ProcedureRunQuerySet.as_manager()
    _writer = _WritableRunQuerySet.as_manager()  # the store's door; see models/readonly.py

    class Meta:
        verbose_name = "procedure"
        constraints = [
            models.UniqueConstraint(fields=["key"], condition=Q(key__isnull=False), name="procedures_unique_key"),
            # A schedule's tick starts at most one run, whatever number of tickers race.
            models.UniqueConstraint(fields=["schedule", "tick_at"], condition=Q(schedule__isnull=False),
                                    name="procedures_one_run_per_tick"),
        ]
        indexes = [
            # The claim: due rows in priority, then run_at order. Partial, so finished rows cost nothing.
            # Unlimited ones only: rows over a limit at the front of a queue cost the fast path nothing.
            models.Index(fields=["-priority", "run_at"], condition=Q(status__in=CLAIMABLE, limits__isnull=True),
                         name="procedures_claim_idx"),
            # Procedures with flow-control limits, decided in a pass of their own (store.limits).
            models.Index(fields=["-priority", "run_at"], condition=Q(status__in=CLAIMABLE, limits__isnull=False),
                         name="procedures_limited_claim_idx"),
            # Procedures taking lock keys for the first time, decided before the rest of a claim.
            models.Index(fields=["-priority", "run_at"], name="procedures_key_claim_idx",
                         condition=Q(status__in=CLAIMABLE, keys_held=False, waiting_for_keys=False)
                         & ~Q(lock_keys=[])),
            # The next due time an idle worker waits for.
            models.Index(fields=["run_at"], condition=Q(status__in=CLAIMABLE), name="procedures_due_idx"),
            # Timers: the wake pass and the next wake time, without the claim ever scanning sleepers.
            models.Index(fields=["wake_at"], condition=Q(status=RunStatus.WAITING.value, wake_at__isnull=False),
                         name="procedures_wake_idx"),
            # The recovery sweep: leases that expired.
            models.Index(fields=["lease_expires_at"], condition=Q(status__in=LEASED), name="procedures_lease_idx"),
            # Trees: a parent's children, a root's members (and the foreign keys' checks on delete).
            models.Index(fields=["parent"], condition=Q(parent__isnull=False), name="procedures_parent_idx"),
            models.Index(fields=["root"], condition=Q(root__isnull=False), name="procedures_root_idx"),
            # The sweep's safety net for lock key waiters (store.locks.wake_stranded), every few seconds on every
            # worker: without it, a scan of the whole table (1.2 s beside ten million finished rows).
            models.Index(fields=["id"], condition=Q(waiting_for_keys=True), name="procedures_key_waiters_idx"),
            # The sweep's safety net for parents (store.tree.wake_stranded_parents): the rows waiting for children,
            # not the sleepers and event waiters beside them (a scan of a million sleepers in every sweep otherwise).
            models.Index(fields=["id"], name="procedures_parents_waiting_idx",
                         condition=Q(status=RunStatus.WAITING.value, waiting_for=WaitingFor.CHILDREN.value)),
            # Retention: finished roots oldest first.
            models.Index(fields=["finished_at"], condition=Q(root__isnull=True), name="procedures_prune_idx"),
            # The dashboard's charts: procedures finished in a time range, by outcome (an index-only scan).
            # Partial: unfinished rows, the ones updated at every claim and heartbeat, are not in it.
            models.Index(fields=["finished_at", "status"], condition=Q(finished_at__isnull=False),
                         name="procedures_finished_idx"),
            # The admin's list: newest first (ORDER BY created_at DESC, id DESC), unfiltered or filtered by
            # status, type or queue, each read from one index range in list order.
            models.Index(fields=["created_at", "id"], name="procedures_created_idx"),
            models.Index(fields=["status", "created_at", "id"], name="procedures_status_idx"),
            models.Index(fields=["type_name", "created_at", "id"], name="procedures_type_idx"),
            models.Index(fields=["queue", "created_at", "id"], name="procedures_queue_idx"),
            # The admin's failures of one type (its status and type filters together), newest first, and their
            # capped count as an index-only scan: without it a bitmap of every row of the type and of every
            # failure (5,700 buffers beside a million procedures, 400 ms at ten million). Partial: a row enters it
            # once, when it fails or is cancelled, so claims and finishes never write it.
            models.Index(fields=["type_name", "status", "created_at", "id"], condition=Q(status__in=UNSUCCESSFUL),
                         name="procedures_failed_type_idx"),
            # The admin's search by words common to many errors: the procedures with an error, newest first, walked
            # until a page of them matches (admin/changelist.py, newest_matches_first). Partial, as the trigram
            # index: a row enters it when it fails or is retried, never on the way of a run that succeeds.
            models.Index(fields=["created_at", "id"], condition=~Q(status=RunStatus.DONE.value) & ~Q(error=""),
                         name="procedures_error_created_idx"),
            # The admin's "retryable failures" filter, newest first, and its capped count (an index-only range; it
            # was a scan of the table until 10,001 matches, 100 ms beside ten million). A row enters it when it fails
            # for good and a manual retry would run it again.
            models.Index(fields=["created_at", "id"], name="procedures_retryable_idx",
                         condition=Q(status=RunStatus.FAILED.value, failure_can_retry=True)),
            # A schedule's runs, newest first (the admin's schedule filter); partial: most runs have no schedule.
            models.Index(fields=["schedule", "created_at", "id"], condition=Q(schedule__isnull=False),
                         name="procedures_schedule_idx"),
            # A run's re-runs (its page links them); partial: most runs are no re-run.
            models.Index(fields=["rerun_of"], condition=Q(rerun_of__isnull=False), name="procedures_rerun_of_idx"),
        ]
        permissions = [
            ("retry_procedurerun", "Can retry failed procedures"),
            ("cancel_procedurerun", "Can cancel procedures and their sub-procedures"),
            ("rerun_procedurerun", "Can re-run finished procedures from a step"),
            ("send_event_procedurerun", "Can send events to procedures"),
        ]

    def __str__(self) -> str:
        return f"{self.type_name} {self.id} ({self.status})"

    @property
    def is_final(self) -> bool:
        return self.status in FINAL
