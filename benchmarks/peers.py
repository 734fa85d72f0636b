"""The peers, measured beside us: Procrastinate and DBOS Transact through their own harness.

The peer harness (``../shared/peers``: ``driver.py``, ``setup.sh``) is not ours
and is not vendored: it is copied once into ``var/peers`` (it writes its
virtualenv and results beside itself), installed there by its own
``setup.sh`` (Python 3.12, Django 6.1 and the peers' pinned versions), and
driven one scenario at a time with ``driver.py``. Every driver call is a
subprocess in its own session, killed as a group if it overruns its time
limit, so one stuck peer cannot hang the run.

:func:`run_peer` is the one entry point: ``run_peer(peer, scenarios, n, reps)``
returns, per scenario, the driver's result record of each repetition.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import ROOT, BenchmarkError, Server

#: Where the shared harness is looked for (first hit wins); ``PROCEDURES_PEERS_DIR`` overrides.
CANDIDATES = (ROOT.parent / "shared" / "peers", ROOT.parent.parent / "shared" / "peers")
#: The working copy: the harness writes ``.venv/`` and ``results/`` beside its own files.
WORK_COPY = ROOT / "var" / "peers"
#: Longest a single driver call (one peer, one repetition) may take before its process group is killed.
DRIVER_TIMEOUT = 900.0
#: Longest ``setup.sh`` may take (it installs from the package index).
SETUP_TIMEOUT = 900.0


@dataclass(frozen=True)
class Comparison:
    """One line of the comparison: a peer's scenario against the same work done by our workers."""

    peer: str
    scenario: str
    label: str
    #: "noop": N one-step no-op jobs; "steps10": N/10 jobs of ten no-op steps (rates are steps/s).
    work: str
    #: Seconds one repetition of the peer's scenario takes on the 2-core reference machine at N = 5,000
    #: (template, enqueue, drain, teardown): the expected duration printed before a run.
    seconds_at_5000: float


COMPARISONS = (
    Comparison("procrastinate", "thr-W2-c4", "Procrastinate 3.10, 2 workers x concurrency 4", "noop", 30.0),
    Comparison("dbos", "thr-W2-p1ms", "DBOS Transact 3.4, 2 workers, polling every 1 ms", "noop", 45.0),
    Comparison("dbos", "steps10-W2-p1ms", "DBOS Transact 3.4, 10-step workflows, 2 workers, 1 ms polling",
               "steps10", 25.0),
)
#: The packages whose versions are shown for each peer (the harness records every one it installed).
PACKAGES = {"procrastinate": ("procrastinate", "Django", "psycopg"), "dbos": ("dbos", "SQLAlchemy", "psycopg"),
            "dtdb": ("django-tasks-db", "Django", "psycopg")}
#: Seconds one repetition of our side takes at N = 5,000 (two drains, fresh databases).
OURS_SECONDS_AT_5000 = 25.0


def source_dir() -> Path:
    """The shared harness, read-only; ``BenchmarkError`` saying where it was looked for if absent."""
    given = os.environ.get("PROCEDURES_PEERS_DIR")
    candidates = (Path(given),) if given else CANDIDATES
    for path in candidates:
        if (path / "driver.py").is_file() and (path / "setup.sh").is_file():
            return path.resolve()
    raise BenchmarkError("the peer harness (driver.py, setup.sh) was not found in "
                         + ", ".join(str(p) for p in candidates)
                         + "; set PROCEDURES_PEERS_DIR to the folder that holds it")


def _stale(source: Path, copy: Path) -> bool:
    """Whether the copy lacks, or differs in, any file of the harness (its venv and results aside)."""
    compared = filecmp.dircmp(source, copy, ignore=[".venv", "results", "__pycache__"])

    def differs(c: filecmp.dircmp[str]) -> bool:
        return bool(c.left_only or c.diff_files or c.funny_files) or any(differs(s) for s in c.subdirs.values())

    return differs(compared)


def prepare(progress: Callable[[str], None] = print) -> Path:
    """The working copy of the harness with its virtualenv, copied and installed when missing or changed."""
    source, copy = source_dir(), WORK_COPY
    if not copy.exists() or _stale(source, copy):
        progress(f"  peers: copying the harness from {source} to {copy}")
        copy.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, copy, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".venv", "results",
                                                                                          "__pycache__"))
        stamp = copy / ".venv" / ".procedures-installed"
        stamp.unlink(missing_ok=True)  # a changed requirements.txt is installed again
    if not (copy / ".venv" / ".procedures-installed").exists():
        progress("  peers: installing the harness's own virtualenv (bash setup.sh; a few minutes the first time)")
        done = _run(["bash", "setup.sh"], copy, SETUP_TIMEOUT)
        if done.returncode != 0:
            raise BenchmarkError(f"the peer harness's setup.sh failed ({done.returncode}):\n{done.output[-3000:]}")
        (copy / ".venv" / ".procedures-installed").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
    return copy


@dataclass
class _Done:
    returncode: int
    output: str
    timed_out: bool = False


def _run(command: Sequence[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> _Done:
    """Run ``command`` in its own session; on overrun, SIGTERM then SIGKILL its whole process group."""
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True, text=True)
    try:
        output, _ = process.communicate(timeout=timeout)
        return _Done(process.returncode, output)
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(process.pid, sig)  # the driver and the peer workers it started: the group we started
            except ProcessLookupError:
                break
            try:
                output, _ = process.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                output = ""
        return _Done(process.returncode if process.returncode is not None else -9, output or "", timed_out=True)


def run_peer(peer: str, scenarios: Sequence[str], n: int, reps: int = 1, *, first_rep: int = 1,
             server: Server | None = None, timeout: float = DRIVER_TIMEOUT,
             progress: Callable[[str], None] = print) -> dict[str, list[dict[str, Any]]]:
    """Run ``scenarios`` of ``peer`` (driver.py's names) ``reps`` times with ``n`` jobs each.

    Returns ``{scenario: [result, ...]}``, one ``result`` (the driver's record: ``jobs_per_s_wall``,
    ``jobs_per_s_active``, ``steps_per_s_*``, ``per_job_db``, ``cpu``, …) per repetition, in order.
    Repetitions are numbered from ``first_rep`` (so interleaved callers keep the driver's log
    folders apart). ``BenchmarkError`` if the driver fails, overruns ``timeout`` seconds, or a
    scenario produced no record.
    """
    copy = prepare(progress)
    python = copy / ".venv" / "bin" / "python"
    tag = f"procedures-{os.getpid()}-"
    env = dict(os.environ)
    for name in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "PROCEDURES_JSON", "VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(name, None)  # ours, not the harness's
    if server is not None:
        env.update(BENCH_PGHOST=server.host, BENCH_PGUSER=server.user, PGPORT=str(server.port))
        if server.password:
            env["PGPASSWORD"] = server.password
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in scenarios}
    for rep in range(first_rep, first_rep + reps):
        command = [str(python), "driver.py", "--peer", peer, "--rep", str(rep), "--n", str(n), "--tag", tag,
                   "--only", *scenarios]
        started = time.monotonic()
        done = _run(command, copy, timeout, env)
        if done.timed_out:
            raise BenchmarkError(f"{peer} rep {rep}: the driver ran past {timeout:.0f}s and was stopped:\n"
                                 f"{done.output[-3000:]}")
        if done.returncode != 0:
            raise BenchmarkError(f"{peer} rep {rep}: driver.py exited with {done.returncode}:\n{done.output[-3000:]}")
        records = _records(copy / "results" / "raw.jsonl", tag, peer, rep)
        for scenario in scenarios:
            if scenario not in records:
                raise BenchmarkError(f"{peer} rep {rep}: no result for {scenario}:\n{done.output[-3000:]}")
            results[scenario].append(records[scenario])
        progress(f"  {peer} rep {rep}: {', '.join(scenarios)} in {time.monotonic() - started:.0f}s")
    return results


def _records(path: Path, tag: str, peer: str, rep: int) -> dict[str, dict[str, Any]]:
    """The result of each scenario the driver appended for this tag, peer and repetition (the last wins)."""
    found: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return found
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("tag") == tag and record.get("peer") == peer and record.get("rep") == rep:
            found[record["scenario"]] = {**record["result"], "command": record.get("command", ""),
                                         "n": record.get("n"), "versions": {
                                             k: v for k, v in record.get("meta", {}).get("peer_versions", {}).items()
                                             if v and k in PACKAGES.get(peer, ())}}
    return found


def rate(result: dict[str, Any], work: str, active: bool) -> float | None:
    """Jobs/s (or steps/s for ten-step work) of one peer result: from its first start (active) or wall."""
    key = ("steps_per_s_" if work == "steps10" else "jobs_per_s_") + ("active" if active else "wall")
    value = result.get(key)
    return float(value) if value else None


def expected_seconds(n: int, reps: int) -> float:
    """What a comparison of ``reps`` repetitions at ``n`` jobs should take on the reference machine.

    About a third of each figure at N = 5,000 is fixed (templates, migrations, start-up); the rest
    grows with ``n``.
    """
    per_rep = OURS_SECONDS_AT_5000 + sum(c.seconds_at_5000 for c in COMPARISONS)
    return per_rep * (0.3 + 0.7 * n / 5000) * reps
