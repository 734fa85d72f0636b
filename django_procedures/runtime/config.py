"""A worker's configuration and name, resolved once at start-up."""

from __future__ import annotations

import os
import socket
import uuid
from typing import Any

from django.db import connection

from django_procedures.conf import conf
from django_procedures.policy.worker_config import WorkerConfig


def resolve_config(**command_line: Any) -> WorkerConfig:
    """``PROCEDURES`` with the command line's options (``WorkerConfig.resolve``'s keywords) laid over it.

    Raises ``WorkerConfigError`` naming what to change when they contradict each other.
    """
    return WorkerConfig.resolve(conf.merged(), sqlite=connection.vendor == "sqlite", **command_line)


def new_worker_id() -> str:
    """A name no other worker has: host, process id and a random suffix (a pid is reused after a restart)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
