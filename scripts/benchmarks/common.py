"""Paths, logging, statistics and /proc readings every part of the harness shares."""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.files import MARKER

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "bench-out"
WORK = OUT / "work"
PY = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")


def real_python_first(path: str) -> str:
    """`path` with the directory of this interpreter's own binary first, so that the
    workloads' `python3` is an interpreter, not a version manager's shim: pyenv's is a
    bash script that costs ~70 ms a call (more than a whole agent command), and on this
    project's machine it made 10 `python3 -c` edits three quarters of the agent
    workload's native time, hiding what the file system costs."""
    real = Path(os.path.realpath(sys.executable)).parent
    if not (real / "python3").exists():
        return path
    return os.pathsep.join([str(real), *(d for d in path.split(os.pathsep) if d != str(real))])


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def seconds_until(check: Callable[[], bool], what: str, bound: float) -> float:
    """Seconds until `check()` holds (polled every 10 ms); raises past `bound`."""
    t0 = time.perf_counter()
    while not check():
        if time.perf_counter() - t0 > bound:
            raise RuntimeError(f"{what}: not within {bound:g}s")
        time.sleep(0.01)
    return time.perf_counter() - t0


def summary(values: list[float]) -> dict[str, Any]:
    """Median and spread of the repeats (NaN and None left out), as results.json keeps it."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0, "values": []}
    return {
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
        "n": len(vals),
        "values": [round(v, 6) for v in vals],
    }


def med(d: dict[str, Any] | None) -> Any:
    return None if d is None else d.get("median")


def hash_tree(root: Path) -> dict[str, str]:
    """'/relative/path' -> sha256 of every file under root, the marker left out."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name == MARKER:
                continue
            p = Path(dirpath) / name
            out["/" + str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def proc_cpu_ms(pid: int) -> float:
    """utime+stime of a process (all its threads, dead ones included), in ms."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / CLK_TCK


def proc_sched_ns(pid: int) -> int:
    """On-CPU ns summed over the live threads (finer than clock ticks)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total


def proc_io(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            k, v = line.split(":")
            out[k.strip()] = int(v)
    return out


def proc_status_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


# The kernel's cache drops (`echo N > drop_caches`, or a VM balloon asking for memory):
# on a shared VM they can empty dentries and pages under a case, so every case records
# how many happened while it ran.
CHURN_KEYS = ("drop_pagecache", "drop_slab")


def vmstat(keys: tuple[str, ...] = CHURN_KEYS) -> dict[str, int]:
    out = dict.fromkeys(keys, 0)
    with contextlib.suppress(OSError), open("/proc/vmstat") as f:
        for line in f:
            k, _, v = line.partition(" ")
            if k in out:
                out[k] = int(v)
    return out


def churn_since(mark: dict[str, int]) -> dict[str, int]:
    now = vmstat(tuple(mark))
    return {k: now[k] - mark[k] for k in mark}


def counts_since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Per-handler FUSE request deltas (nonzero only)."""
    out = {k: after.get(k, 0) - before.get(k, 0) for k in sorted(set(before) | set(after))}
    return {k: v for k, v in out.items() if v}


def by_handler(counts: dict[str, int]) -> str:
    """FUSE requests by handler for a table cell, most first."""
    return " ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def shown_command(command: str) -> str:
    """A shell command for a markdown table cell (one line, pipes escaped)."""
    return command.replace("\n", " ⏎ ").replace("|", "\\|")


def requests_total(counts: dict[str, int]) -> int:
    """Requests the daemon answered; forget_inodes counts inodes, not requests."""
    return sum(v for k, v in counts.items() if k != "forget_inodes")


def run_timed(
    cmd: list[str] | str, *, cwd: Path | None = None, timeout: float = 300, shell: bool = False
) -> float:
    """Seconds one command took; a failing command is an error, not a number."""
    t0 = time.perf_counter()
    r = subprocess.run(
        cmd,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=timeout,
        shell=shell,
    )
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{cmd!r} failed {r.returncode}: {r.stderr[-500:]!r}")
    return dt


def read_all_cmd(root: Path) -> str:
    return f"find {shlex.quote(str(root))} -type f -print0 | xargs -0 -r cat > /dev/null"
