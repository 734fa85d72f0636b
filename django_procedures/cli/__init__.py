"""``manage.py procedures <subcommand>``: the operator's command line.

Each subcommand is one module of this package with ``HELP``, ``add_arguments(parser)`` and
``run(options, out)``; ``SUBCOMMANDS`` lists them, in the order ``--help`` shows them. Adding a
subcommand is adding its module and one line here.
"""

from __future__ import annotations

#: ``name -> module`` of every subcommand (imported when the command builds its parser).
SUBCOMMANDS: dict[str, str] = {
    "list": "django_procedures.cli.listing",
    "show": "django_procedures.cli.show",
    "retry": "django_procedures.cli.retry",
    "cancel": "django_procedures.cli.cancel",
    "rerun": "django_procedures.cli.rerun",
    "send-event": "django_procedures.cli.send_event",
    "workers": "django_procedures.cli.workers",
    "stats": "django_procedures.cli.stats",
    "schedules": "django_procedures.cli.schedules",
}
