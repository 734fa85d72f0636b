"""Text bound for the database, whatever foreign code put in it: error messages and tracebacks."""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` as a database text column can hold it: NUL characters removed, lone surrogates escaped.

    PostgreSQL refuses NUL in text, and a lone surrogate (half of a UTF-16
    pair) cannot be encoded as UTF-8 at all; it is written as ``\\udXXX``.
    """
    if "\x00" in text:
        text = text.replace("\x00", "")
    if _SURROGATE.search(text):
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)
    return text


def describe(error: BaseException) -> str:
    """``"<Type>: <message>"`` of an exception (just the type when the message is empty), cleaned.

    An exception whose ``__str__`` raises, or returns something that is not a
    string, is described by its type name alone.
    """
    name = _type_name(error)
    try:
        text = str(error)
    except BaseException:  # foreign code: anything it raises means "no message"
        return name
    return clean_text(f"{name}: {text}" if text else name)


def _type_name(error: BaseException) -> str:
    name = type(error).__name__
    return name if isinstance(name, str) else "Exception"
