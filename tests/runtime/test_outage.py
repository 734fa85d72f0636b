"""``ConnectionWatch``: one warning per outage however many threads report it, one line when it is over."""

import logging

from django_procedures.runtime import outage
from django_procedures.runtime.outage import ConnectionWatch


def records(caplog, level):
    return [r.getMessage() for r in caplog.records if r.levelno == level and r.name == "django_procedures.worker"]


def test_many_threads_noticing_one_outage_log_one_warning_and_one_restore(caplog):
    caplog.set_level(logging.DEBUG, logger="django_procedures.worker")
    watch = ConnectionWatch(quiet_seconds=60)
    watch.lost(OSError("server closed the connection unexpectedly\nmore"), "worker loop")
    watch.lost(OSError("terminating connection"), "procedure 1")
    watch.restored()
    watch.restored()
    watch.lost(OSError("terminating connection"), "procedure 2")  # a thread that notices late
    watch.restored()
    (warning,) = records(caplog, logging.WARNING)
    assert warning.startswith("database connection lost (worker loop: server closed the connection unexpectedly)")
    (info,) = records(caplog, logging.INFO)
    assert info.startswith("database connection restored after ")
    assert not watch.down


def test_a_later_outage_is_logged_again(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="django_procedures.worker")
    now = [1000.0]
    monkeypatch.setattr(outage.time, "monotonic", lambda: now[0])
    watch = ConnectionWatch(quiet_seconds=60)
    watch.lost(OSError("down"), "heartbeat")
    now[0] += 2
    watch.restored()
    now[0] += 120
    watch.lost(OSError("down again"), "heartbeat")
    assert len(records(caplog, logging.WARNING)) == 2
    assert watch.down
