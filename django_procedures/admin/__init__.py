"""The operator's admin: procedures list and page, retry and cancel, and the dashboard.

Display and actions only; every change goes through ``django_procedures.store``.
"""

from django.contrib import admin

from django_procedures.admin.procedures import ProcedureRunAdmin
from django_procedures.models import ProcedureRun

admin.site.register(ProcedureRun, ProcedureRunAdmin)

__all__ = ["ProcedureRunAdmin"]
