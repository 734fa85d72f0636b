"""``manage.py procedures <subcommand>``: list, show, retry, cancel, workers, stats, schedules.

A thin front: the subcommands are the modules named in ``django_procedures.cli.SUBCOMMANDS``.
Exit codes: 0 success; 1 an action refused or an id unknown (one line on stderr, nothing
changed); 2 bad usage (argparse's usage line).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_procedures.cli import SUBCOMMANDS
from django_procedures.cli.output import Output, Refused, Usage
from django_procedures.exceptions import InvalidOperation


def subcommand(name: str) -> ModuleType:
    return importlib.import_module(SUBCOMMANDS[name])


class Command(BaseCommand):
    help = "Operate procedures from a shell: list, show, retry, cancel, rerun, send-event, workers, stats, schedules."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
        self.parsers: dict[str, CommandParser] = {}
        for name in SUBCOMMANDS:
            module = subcommand(name)
            self.parsers[name] = commands.add_parser(name, help=module.HELP, description=module.HELP)
            module.add_arguments(self.parsers[name])

    def handle(self, *args: Any, **options: Any) -> None:
        out = Output(self.stdout, self.stderr, as_json=bool(options.get("json")))
        try:
            _no_nul(options)
            subcommand(options["subcommand"]).run(options, out)
        except Usage as usage:
            self.parsers[options["subcommand"]].error(str(usage))  # the usage line; exit 2 from a shell
        except (Refused, InvalidOperation) as refusal:
            raise CommandError(" ".join(str(refusal).split()), returncode=1) from None


def _no_nul(options: dict[str, Any]) -> None:
    """No column holds a NUL character (PostgreSQL refuses it in text): refused here, not a database error."""
    for name, value in options.items():
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and "\x00" in v for v in values):
            raise Refused(f"--{name.replace('_', '-')} cannot contain a NUL character; no stored value has one")
