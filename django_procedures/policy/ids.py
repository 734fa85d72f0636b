"""Procedure ids: UUIDs of version 7 (RFC 9562), which begin with the Unix time in milliseconds.

Ids made close in time sort close together, so a busy system's new procedures write to a few pages at
the end of each index keyed by procedure id (the primary key; the steps' and leases' keys to their
procedure). Random (version 4) ids wrote one random page of each such index per procedure: beside ten
million procedures of history those pages were no longer in memory, and each was read, then written
whole to the WAL after every checkpoint (docs/scaling.md, "Time-ordered ids").
"""

from __future__ import annotations

import os
import time
import uuid

_RAND_A = (1 << 12) - 1
_RAND_B = (1 << 62) - 1


def new_id() -> uuid.UUID:
    """A new version-7 UUID: 48 bits of Unix milliseconds, the version, 74 random bits and the variant.

    Not monotonic within a millisecond (the random bits order those); unique by its random bits, as a
    version-4 UUID is by its 122.
    """
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    return uuid.UUID(int=millis << 80 | 0x7 << 76 | (rand >> 62 & _RAND_A) << 64 | 0b10 << 62 | rand & _RAND_B)


#: Hex digits of an id the admin shows where a whole id would not fit.
SHORT = 8


def short_id(value: uuid.UUID | str) -> str:
    """The last ``SHORT`` hex digits of an id: random in a version-7 id (and in the version-4 ids of procedures made
    before them), where its first digits are the time, alike for every procedure made in the same minute."""
    return str(value)[-SHORT:]
