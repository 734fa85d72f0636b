from django_procedures.models.activity import FinishedCount, Rollup
from django_procedures.models.event import Event
from django_procedures.models.lease import Lease
from django_procedures.models.limit import LimitSlot, LimitUse
from django_procedures.models.lock import KeyRequest
from django_procedures.models.procedure_run import ProcedureRun, ProcedureRunQuerySet
from django_procedures.models.schedule import Schedule
from django_procedures.models.step import Step
from django_procedures.models.worker import Worker, WorkerQuerySet

__all__ = ["Event", "FinishedCount", "KeyRequest", "Lease", "LimitSlot", "LimitUse", "ProcedureRun",
           "ProcedureRunQuerySet", "Rollup",
           "Schedule", "Step", "Worker", "WorkerQuerySet"]
