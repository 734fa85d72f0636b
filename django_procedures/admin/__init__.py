"""The operator's admin: procedures list and page, retry and cancel, the dashboard, and schedules.

Display and actions only; every change goes through ``django_procedures.store``.
"""

from django.contrib import admin

from django_procedures.admin.limits import LimitUseAdmin
from django_procedures.admin.procedures import ProcedureRunAdmin
from django_procedures.admin.schedules import ScheduleAdmin
from django_procedures.admin.workers import WorkerAdmin
from django_procedures.models import LimitUse, ProcedureRun, Schedule, Worker

admin.site.register(ProcedureRun, ProcedureRunAdmin)
admin.site.register(Schedule, ScheduleAdmin)
admin.site.register(Worker, WorkerAdmin)
admin.site.register(LimitUse, LimitUseAdmin)

__all__ = ["LimitUseAdmin", "ProcedureRunAdmin", "ScheduleAdmin", "WorkerAdmin"]
