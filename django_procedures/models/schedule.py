"""``Schedule``: starts procedures on a cadence under overlap and missed-tick policies."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from django_procedures.models.readonly import ReadOnlyQuerySet, StoreWritten, WriterQuerySet
from django_procedures.policy.cron import CronError, CronExpression
from django_procedures.policy.overdue import overdue_lag
from django_procedures.policy.schedule import Cadence, Missed, Mode, ScheduleSettings, every
from django_procedures.policy.schedule_args import MAX_CONCURRENCY, duration_problem
from django_procedures.policy.state import StateEncoder

#: What computing a schedule's ticks can raise for a definition stored past validation (a cron expression
#: or time zone this process cannot read, a time past ``datetime.max``).
CADENCE_ERRORS = (ValueError, OverflowError, ZoneInfoNotFoundError, TypeError)

MODE_CHOICES = [(m.value, m.value.replace("_", " ")) for m in Mode]
MISSED_CHOICES = [(m.value, m.value.replace("_", " ")) for m in Missed]


class Schedule(StoreWritten):
    """A named cadence for one procedure type; its pending ticks and metrics change only under its row lock."""

    name = models.CharField(max_length=200, unique=True)
    procedure = models.CharField(max_length=255, help_text="Type name of the procedure to start.")
    state = models.JSONField(default=dict, blank=True, encoder=StateEncoder,
                             help_text="State of every run (a JSON object).")
    mode = models.CharField(max_length=20, choices=MODE_CHOICES, default=Mode.FIXED_RATE)
    period = models.DurationField(null=True, blank=True)
    cron = models.CharField(max_length=100, blank=True)
    timezone = models.CharField(max_length=64, blank=True, help_text="For cron; default TIME_ZONE.")
    initial_delay = models.DurationField(default=timedelta(0), blank=True)
    max_concurrency = models.PositiveIntegerField(default=1)
    missed = models.CharField(max_length=20, choices=MISSED_CHOICES, default=Missed.SKIP)
    max_pending = models.PositiveIntegerField(default=0)
    max_run_time = models.DurationField(null=True, blank=True)
    queue = models.CharField(max_length=100, blank=True)
    enabled = models.BooleanField(default=True)
    disabled_reason = models.TextField(blank=True)
    from_code = models.BooleanField(default=False, editable=False)

    next_tick_at = models.DateTimeField(null=True, blank=True)
    pending_ticks = models.JSONField(default=list, blank=True, editable=False)
    active_runs = models.PositiveIntegerField(default=0, editable=False)

    runs = models.PositiveIntegerField(default=0, editable=False)
    failures = models.PositiveIntegerField(default=0, editable=False)
    skips = models.PositiveIntegerField(default=0, editable=False)
    overlaps = models.PositiveIntegerField(default=0, editable=False)
    last_tick_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_drift_ms = models.BigIntegerField(null=True, blank=True, editable=False)
    last_elapsed_ms = models.BigIntegerField(null=True, blank=True, editable=False)
    max_elapsed_ms = models.BigIntegerField(null=True, blank=True, editable=False)
    #: Why the last pass could not tick this schedule (or a finishing run could not set its next tick);
    #: cleared by the next pass that ticks it and by a change of its definition.
    last_error = models.TextField(blank=True, editable=False)
    last_error_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ReadOnlyQuerySet.as_manager()
    _writer = WriterQuerySet.as_manager()  # the store's door; see models/readonly.py

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(period__isnull=True) | Q(period__gt=timedelta(0)),
                                   name="procedures_schedule_period_positive"),
            models.CheckConstraint(condition=~Q(mode="fixed_delay") | Q(period__isnull=False),
                                   name="procedures_schedule_fixed_delay_period"),
            models.CheckConstraint(condition=Q(period__isnull=False) | ~Q(cron=""),
                                   name="procedures_schedule_has_cadence"),
            models.CheckConstraint(condition=Q(mode="fixed_rate_overlap", max_concurrency__gte=2)
                                   | (~Q(mode="fixed_rate_overlap") & Q(max_concurrency=1)),
                                   name="procedures_schedule_concurrency_fits_mode"),
            models.CheckConstraint(condition=~Q(missed="catch_up") | Q(max_pending__gte=1),
                                   name="procedures_schedule_catch_up_pending"),
        ]
        indexes = [models.Index(fields=["next_tick_at"], condition=Q(enabled=True), name="procedures_due_sched_idx")]
        permissions = [
            ("pause_schedule", "Can pause schedules"),
            ("resume_schedule", "Can resume schedules"),
            ("trigger_schedule", "Can trigger schedules now"),
        ]

    def __str__(self) -> str:
        return self.name

    # -- the cadence ---------------------------------------------------------------------------

    @property
    def settings(self) -> ScheduleSettings:
        # ScheduleSettings takes the stored strings of its enums (and refuses unknown ones)
        return ScheduleSettings(self.mode, self.max_concurrency, self.missed, self.max_pending)  # type: ignore[arg-type]

    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone or settings.TIME_ZONE)

    def cadence(self) -> Cadence:
        """The next tick strictly after a given time: every ``period``, or the cron expression's next fire."""
        if self.cron:
            expression, zone = CronExpression.parse(self.cron), self.zone()
            return lambda after: expression.next_after(after, zone)
        assert self.period is not None
        return every(self.period)

    def first_tick(self, now: datetime) -> datetime:
        """A rate schedule with no initial delay is due at once; a cron one at its first fire time after that."""
        start = now + (self.initial_delay or timedelta(0))
        if self.cron:
            return self.cadence()(start - timedelta(microseconds=1))
        return start

    def pending(self) -> tuple[datetime, ...]:
        return tuple(datetime.fromisoformat(t) for t in self.pending_ticks)

    def overdue(self, now: datetime) -> timedelta | None:
        """How long its next tick has waited, once it is more than two ticks behind (nothing ticks it); else None.

        A paused schedule is never overdue, nor one whose cadence cannot be read (it shows its error instead).
        """
        if not self.enabled:
            return None
        try:
            return overdue_lag(self.next_tick_at, now, self.cadence())
        except CADENCE_ERRORS:
            return None

    # -- validation ----------------------------------------------------------------------------

    def clean(self) -> None:
        errors = validation_errors(self)
        if errors:
            raise ValidationError(errors)

    def snapshot(self) -> dict[str, Any]:
        """Metrics as a plain dict (``runs``, ``skips``, ``overlaps``, ``failures``, ``active_runs``, …)."""
        return {
            "name": self.name, "enabled": self.enabled, "mode": self.mode, "runs": self.runs, "skips": self.skips,
            "overlaps": self.overlaps, "failures": self.failures, "active_runs": self.active_runs,
            "pending_runs": len(self.pending_ticks), "last_drift_ms": self.last_drift_ms,
            "last_elapsed_ms": self.last_elapsed_ms, "max_elapsed_ms": self.max_elapsed_ms,
            "next_tick_at": self.next_tick_at, "last_tick_at": self.last_tick_at,
            "disabled_reason": self.disabled_reason, "last_error": self.last_error,
            "last_error_at": self.last_error_at,
        }


def validation_errors(s: Schedule) -> dict[str, str]:
    """Field -> a sentence saying what to change; shared by ``clean()`` and the store's ``check_schedule``.

    Whether ``procedure`` names a registered class is not a model's to know:
    the store (``register_definition``, ``save_schedule``) and the admin form check it.
    """
    from django_procedures.policy.options import check_queue

    errors: dict[str, str] = {}
    if not isinstance(s.name, str) or not s.name.strip():
        errors["name"] = "give the schedule a name"
    for field in ("name", "procedure", "cron", "timezone"):  # the database would refuse them with a DataError
        value = getattr(s, field)
        limit = getattr(s._meta.get_field(field), "max_length", None)
        if isinstance(value, str) and limit is not None and len(value) > limit:
            errors[field] = f"{field} must be at most {limit} characters; got {len(value)}"
        elif isinstance(value, str) and "\x00" in value:
            errors[field] = f"{field} must not contain a NUL character (\\x00), which the database cannot store"
    for name, positive in (("period", True), ("initial_delay", False), ("max_run_time", True)):
        value = getattr(s, name)
        problem = None if value is None else duration_problem(name, value, positive=positive)
        if problem:
            errors[name] = problem
    if s.cron and s.period is not None:
        errors["cron"] = "give either a period or a cron expression, not both"
    elif not s.cron and s.period is None:
        errors["period"] = "give a period (for example timedelta(minutes=5)) or, for rate modes, a cron expression"
    if s.cron:
        if s.mode == Mode.FIXED_DELAY:
            errors["cron"] = ("fixed_delay runs a period after the previous run finishes, so it needs a period, "
                              "not a cron expression; use mode fixed_rate for cron")
            if s.period is None:
                errors["period"] = "fixed_delay needs a period: the time from the end of one run to the next start"
        else:
            try:
                CronExpression.parse(s.cron)
            except CronError as error:
                errors["cron"] = str(error)
    if s.timezone:
        try:
            ZoneInfo(s.timezone)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            errors["timezone"] = (f"unknown time zone {s.timezone!r} (this process's time zone data has no such "
                                  "zone); use an IANA name such as 'Europe/Berlin'")
    if isinstance(s.max_concurrency, int) and s.max_concurrency > MAX_CONCURRENCY:
        errors["max_concurrency"] = f"max_concurrency must be at most {MAX_CONCURRENCY}; got {s.max_concurrency}"
    try:
        errors.update({k: v for k, v in ScheduleSettings(s.mode, s.max_concurrency, s.missed,  # type: ignore[arg-type]
                                                         s.max_pending)
                      .errors().items() if k not in errors})
    except (ValueError, TypeError) as error:
        errors.setdefault("mode", str(error))
    if s.queue:  # empty: the procedure class's queue
        try:
            check_queue(s.queue)
        except (TypeError, ValueError) as error:
            errors["queue"] = str(error)
    if not isinstance(s.state, dict):
        errors["state"] = "state must be a JSON object"
    else:
        from django_procedures.policy.state import find_problem

        problem = find_problem(s.state)
        if problem:
            errors["state"] = problem
    return errors
