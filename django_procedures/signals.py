"""Django signals sent after commit for each transition of a procedure.

Each receives ``sender`` (the ``ProcedureRun`` class) and ``procedure_id``,
``type_name``; step signals add ``step_index`` and ``step_name``; failure
signals add ``error``. Signals are at-most-once: a crash between commit and
send loses one. Audits that must be complete read the ``Step`` and ``Lease`` tables.
"""

from django.dispatch import Signal

procedure_submitted = Signal()
procedure_started = Signal()
step_committed = Signal()
procedure_retrying = Signal()
procedure_failed = Signal()
procedure_done = Signal()
procedure_released = Signal()
procedure_cancelled = Signal()
procedure_rolled_back = Signal()
