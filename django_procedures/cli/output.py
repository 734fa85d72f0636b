"""What every subcommand prints through: aligned tables that fit 100 columns, one JSON document, the
confirmation prompt, and the one-line refusal that exits 1."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, TextIO

#: The width a human table must fit in.
WIDTH = 100
#: Bulk actions touching more rows than this ask first (or need ``--yes``).
CONFIRM_ABOVE = 100


class Refused(Exception):  # a refusal, not a crash: the command exits 1 with this one line
    """An action refused or an id unknown: one line on stderr, exit 1, nothing changed."""


class Usage(Exception):  # bad usage: argparse's usage line and exit 2
    """Arguments that parse but do not make sense together: the subcommand's usage line, exit 2."""


def one_line(text: str) -> str:
    return " ".join(str(text).split())


#: Columns never cut: an operator copies their values into the next command.
WHOLE = frozenset({"id", "worker", "name"})


def fit(columns: Sequence[str], rows: Sequence[Sequence[str]], width: int = WIDTH) -> list[str]:
    """``columns`` and ``rows`` as aligned lines no longer than ``width``: the widest columns are cut first
    (a cut cell ends in ``…``), never below their header's length, and the ``WHOLE`` columns never."""
    rows = [[one_line(cell) for cell in row] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    floor = [widths[i] if c in WHOLE else max(len(c), 4) for i, c in enumerate(columns)]
    gaps = 2 * (len(columns) - 1)
    while sum(widths) + gaps > width:
        i = max(range(len(widths)), key=lambda k: (widths[k] - floor[k] > 0, widths[k]))
        if widths[i] <= floor[i]:
            break
        widths[i] -= 1

    def cut(value: str, w: int) -> str:
        return value if len(value) <= w else value[: w - 1] + "…"

    return ["  ".join(cut(v, w).ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
            for line in [list(columns), *rows]]


class Stream(Protocol):
    """What is written to: a text stream or Django's ``OutputWrapper``."""

    def write(self, msg: str = "", /) -> Any: ...

    def flush(self) -> Any: ...


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


class Output:
    """The streams of one command run and how it writes to them."""

    def __init__(self, stdout: Stream, stderr: Stream, *, as_json: bool = False, stdin: TextIO | None = None) -> None:
        self.stdout, self.stderr, self.as_json = stdout, stderr, as_json
        self.stdin = stdin if stdin is not None else sys.stdin

    def line(self, text: str = "") -> None:
        self.stdout.write(text + "\n")

    def note(self, text: str) -> None:
        """A remark beside the result (stderr, so ``--json`` output stays one document)."""
        self.stderr.write(text + "\n")

    def table(self, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        for text in fit(columns, rows):
            self.line(text)

    def document(self, value: Any) -> None:
        """The one JSON document of a ``--json`` run."""
        self.stdout.write(json.dumps(value, default=_default, indent=2, sort_keys=False) + "\n")

    def confirm(self, count: int, what: str, *, yes: bool) -> None:
        """Ask before touching more than ``CONFIRM_ABOVE`` rows, on a terminal; elsewhere ``--yes`` is needed."""
        if yes or count <= CONFIRM_ABOVE:
            return
        if not _is_tty(self.stdin):
            raise Refused(f"this would {what} {count} procedures; pass --yes to do it without a terminal "
                          "(or --dry-run to see them)")
        self.stderr.write(f"This will {what} {count} procedures. Type yes to go on: ")
        self.stderr.flush()
        answer = self.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            raise Refused(f"not confirmed; nothing was changed ({count} procedures left alone)")


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
