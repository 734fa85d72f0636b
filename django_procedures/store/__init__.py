"""The only code that writes procedure state.

Every write about a claimed procedure is fenced on ``(id, lease_token)``; a
fenced write that matches no row raises :class:`~django_procedures.exceptions.LeaseLost`
from :func:`django_procedures.store.transitions.fenced_update`, and nowhere else.
"""
