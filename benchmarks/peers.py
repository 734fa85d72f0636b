"""The peers, run by their own harness beside our benchmarks: ``run_peer("dtdb", ["thr-W2", "lat-W2"], n, reps)``.

The harness (``../shared/peers``; ``BENCH_PEERS_HARNESS`` names another copy)
drives each peer through its own API and worker command on the same
PostgreSQL server. It is read-only where it is kept, so it is copied once into
a cache directory (``BENCH_PEERS_DIR``, default ``$TMPDIR/django-procedures-peers``),
where its ``setup.sh`` installs its own virtualenv (Python 3.12, Django 6.1:
minutes, the first time only). Nothing of it is imported here: its
``driver.py`` runs in that virtualenv and appends one JSON record per scenario
to ``results/raw.jsonl``, which :func:`run_peer` reads back.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.harness import ROOT, BenchmarkError

#: Where the harness is looked for, in order (a worktree of this repository sits one level deeper than /work/main).
HARNESS_CANDIDATES = (ROOT.parent / "shared" / "peers", ROOT.parent.parent / "shared" / "peers")


#: Longest one driver call (one peer, one repetition) may run before its process group is stopped.
DRIVER_TIMEOUT = 900.0


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in its own session; past ``timeout``, SIGTERM then SIGKILL its whole process group."""
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, start_new_session=True, text=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)  # the driver and the peer's workers: the group this call started
            except ProcessLookupError:
                break
            try:
                out, err = process.communicate(timeout=30)
                break
            except subprocess.TimeoutExpired:
                continue
        raise BenchmarkError(f"the peer harness ran past {timeout:.0f}s and was stopped ({' '.join(command[1:])})"
                             ) from None
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def harness_source() -> Path:
    named = os.environ.get("BENCH_PEERS_HARNESS")
    for path in ([Path(named)] if named else HARNESS_CANDIDATES):
        if (path / "driver.py").exists():
            return path
    where = named or " or ".join(str(p) for p in HARNESS_CANDIDATES)
    raise BenchmarkError(f"the peer harness (driver.py) is not at {where}; set BENCH_PEERS_HARNESS to its folder")


def harness_copy() -> Path:
    """The working copy of the harness, made (and its virtualenv installed) on first use."""
    default = Path(tempfile.gettempdir()) / f"django-procedures-peers-{os.getuid()}"
    dest = Path(os.environ.get("BENCH_PEERS_DIR") or default)
    if not (dest / "driver.py").exists():
        shutil.copytree(harness_source(), dest, ignore=shutil.ignore_patterns(".venv", "results"),
                        dirs_exist_ok=True)
        for path in [dest, *dest.rglob("*")]:  # the source is read-only; the copy writes .venv and results
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    if not (dest / ".venv" / "bin" / "python").exists():
        done = subprocess.run(["bash", str(dest / "setup.sh")], cwd=dest, capture_output=True, text=True)
        if done.returncode != 0:
            raise BenchmarkError(f"the peer harness's setup.sh failed in {dest}:\n{done.stdout[-2000:]}"
                                 f"{done.stderr[-2000:]}")
    return dest


def run_peer(peer: str, scenarios: list[str], n: int, reps: int, *, host: str = "127.0.0.1",
             user: str = "postgres", timeout: float = DRIVER_TIMEOUT) -> dict[str, Any]:
    """Run ``scenarios`` of ``peer`` (``dtdb``, ``procrastinate``, ``dbos``, ``celery``) ``reps`` x ``n`` jobs.

    Returns ``{"peer", "scenarios": {name: [result of each rep]}, "meta"}``: each result is the
    harness's own record (throughput: ``jobs_per_s_wall``, ``jobs_per_s_active``, ``cpu``...;
    latency: ``p50_ms``, ``p95_ms``, ``p99_ms``...; see the harness's ``driver.py``), and ``meta`` its
    versions and settings. The PostgreSQL server is ``host`` as ``user`` (the harness's own
    environment variables ``BENCH_PGHOST``/``BENCH_PGUSER``). A driver call running past ``timeout``
    seconds is stopped with the peer workers it started (its process group) and is an error.
    """
    if reps < 1 or n < 1 or not scenarios:
        raise ValueError("run_peer needs at least one scenario, n >= 1 and reps >= 1")
    home = harness_copy()
    tag = f"dp-{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}-"  # this call's records, and only them
    env = {**os.environ, "BENCH_PGHOST": host, "BENCH_PGUSER": user, "PYTHONUNBUFFERED": "1"}
    for name in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(name, None)  # ours, not the harness's
    for rep in range(1, reps + 1):
        command = [str(home / ".venv" / "bin" / "python"), "driver.py", "--peer", peer, "--rep", str(rep),
                   "--n", str(n), "--tag", tag, "--only", *scenarios]
        done = _run(command, home, env, timeout)
        if done.returncode != 0:
            raise BenchmarkError(f"the peer harness failed ({' '.join(command[1:])}):\n{done.stdout[-2000:]}"
                                 f"{done.stderr[-3000:]}")
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in scenarios}
    meta: dict[str, Any] = {}
    with open(home / "results" / "raw.jsonl") as records:
        for line in records:
            record = json.loads(line)
            if record.get("tag") == tag and record.get("peer") == peer and record.get("scenario") in found:
                found[record["scenario"]].append(record["result"])
                meta = record.get("meta", meta)
    wrong = {name: len(results) for name, results in found.items() if len(results) != reps}
    if wrong:
        raise BenchmarkError(f"the peer harness recorded {wrong} results of {peer}'s scenarios, not {reps} each")
    return {"peer": peer, "scenarios": found, "meta": meta}
