from django_procedures.models.lease import Lease
from django_procedures.models.procedure_run import ProcedureRun, ProcedureRunQuerySet
from django_procedures.models.step import Step

__all__ = ["Lease", "ProcedureRun", "ProcedureRunQuerySet", "Step"]
