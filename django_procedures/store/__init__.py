"""The only code that writes procedure state.

Every write about a claimed procedure is a transition in
:mod:`django_procedures.store.transitions`, fenced on ``(id, lease_token)``
(:mod:`django_procedures.store.fence`); one that matches no row raises
:class:`~django_procedures.exceptions.LeaseLost`.
"""
