"""Case 2c: the read side of the agent's commands where memfs serves opens with no round
trip (zero-message opens, docs/reliability.md §3): a writable mount with default options
(zero-message opens since issue 37) and a read-only one, next to a writable mount with
`--open-requests` (the opt-out: OPEN/RELEASE/FLUSH) and native.

Also repeated reads of every file of the tree (warm, ops/s): through Python's `open()`
(the per-operation bench's `read_warm`; it asks `isatty`, one FUSE_IOCTL that libfuse
answers and nothing removes) and through bare `os.open`/`read`/`close`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import workloads
from .common import (
    by_handler,
    counts_since,
    log,
    med,
    requests_total,
    run_timed,
    shown_command,
    summary,
)

if TYPE_CHECKING:
    from .cases import Bench

# The commands of case 2b that only read.
READ_COMMANDS = (
    "cat",
    "head_wc",
    "stat",
    "stat_missing",
    "ls_la",
    "ls_R",
    "grep_dir",
    "grep_all",
    "find",
)
KINDS = ("native", "memfs", "memfs_open", "memfs_ro")
MOUNTED = KINDS[1:]
READ_PASSES = 3  # repeated reads: 1 warming pass, then these


def _python_read(p: Path) -> None:
    with open(p, "rb") as f:
        f.read()


def _os_read(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.read(fd, 1 << 16)  # the tree's files are < 4 KiB; a bigger buffer costs its malloc
    finally:
        os.close(fd)


READS: dict[str, Callable[[Path], None]] = {"python": _python_read, "os": _os_read}


def _read_all(files: list[Path], read: Callable[[Path], None]) -> float:
    """ops/s of open+read+close over `files`."""
    t0 = time.perf_counter()
    for p in files:
        read(p)
    return len(files) / (time.perf_counter() - t0)


def _vs_native(values: dict[str, list[float]]) -> dict[str, Any]:
    """Each memfs mount / native, repeat by repeat."""
    return {
        f"{k}_vs_native": summary([a / b for a, b in zip(values[k], values["native"], strict=True)])
        for k in MOUNTED
    }


def run(bench: Bench) -> None:
    log(
        f"case 2c: {len(READ_COMMANDS)} read commands on native, memfs (default), memfs "
        "--open-requests and memfs --read-only"
    )
    native = bench.fresh("native-readonly")
    workloads.write_tree(native, bench.items["agent"])
    rw = bench.memfs("readonly", "memfs-readonly-rw").start()
    opt_out = bench.memfs("readonly", "memfs-readonly-open", extra=("--open-requests",)).start()
    ro = bench.memfs("readonly", "memfs-readonly-ro", extra=("--read-only",)).start()
    try:
        mounts = {"memfs": rw, "memfs_open": opt_out, "memfs_ro": ro}
        for m in mounts.values():
            m.wait_content()
        roots = {"native": native, **{k: m.mountpoint for k, m in mounts.items()}}
        counters = {k: m.fuse_requests for k, m in mounts.items()}
        commands = dict(workloads.COMMANDS)
        rows: dict[str, Any] = {}
        for name in READ_COMMANDS:
            times: dict[str, list[float]] = {k: [] for k in KINDS}
            reqs: dict[str, list[int]] = {k: [] for k in MOUNTED}
            last: dict[str, int] = {}
            for n in range(workloads.COMMAND_RUNS):
                for kind in KINDS:
                    count = counters.get(kind)
                    before = count() if count else {}
                    t = run_timed(["bash", "-c", commands[name]], cwd=roots[kind], timeout=120)
                    if n == 0:
                        continue  # warming the caches
                    times[kind].append(t * 1000)
                    if count:
                        spent = counts_since(before, count())
                        reqs[kind].append(requests_total(spent))
                        if kind == "memfs":
                            last = spent
            rows[name] = {
                "command": commands[name],
                **{f"{k}_ms": summary(times[k]) for k in KINDS},
                **_vs_native(times),
                **{f"{k}_requests": summary([float(x) for x in reqs[k]]) for k in MOUNTED},
                "memfs_by_handler": last,
            }
        repeated: dict[str, Any] = {"files": len(bench.items["agent"])}
        files = {k: sorted(roots[k].rglob("*.md")) for k in KINDS}  # listed once, untimed
        for how, read in READS.items():
            reads: dict[str, list[float]] = {k: [] for k in KINDS}
            for k in KINDS:
                _read_all(files[k], read)  # warm
            for _ in range(READ_PASSES):
                for k in KINDS:  # interleaved, so drift hits all alike
                    reads[k].append(_read_all(files[k], read))
            repeated[how] = {**{f"{k}_ops": summary(reads[k]) for k in KINDS}, **_vs_native(reads)}
        bench.results["readonly"] = {
            "runs": workloads.COMMAND_RUNS - 1,
            "rows": rows,
            "zero_message_opens": ro.mount_status()["pyfuse3"].get("zero_message_opens_used"),
            "zero_message_writes": rw.mount_status()["pyfuse3"].get("zero_message_opens_used"),
            "repeated_read": repeated,
        }
    finally:
        ro.stop()
        opt_out.stop()
        rw.stop()


# The mounts with zero-message opens, whose targets these are.
MOUNT_LABELS = {"memfs": "memfs (default)", "memfs_ro": "Read-only mount"}


def targets(rd: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for the zero-message mounts."""
    out = []
    for kind, mount in MOUNT_LABELS.items():
        for how, label in (("python", "Python open()"), ("os", "os.open")):
            rr = med(rd["repeated_read"][how][f"{kind}_vs_native"])
            out.append(
                (f"{mount}: repeated read ({label}) >= 0.5x native ops/s", f"{rr:.2f}x", rr >= 0.5)
            )
        for name, label in (
            ("grep_all", "`grep -r` over 1,000 files"),
            ("ls_R", "`ls -R` of 1,000 files warm"),
        ):
            row = rd["rows"].get(name)
            if row:
                v = med(row[f"{kind}_vs_native"])
                out.append(
                    (
                        f"{mount}: {label} <= 1.5x native",
                        f"{v:.2f}x ({med(row[f'{kind}_requests']):.0f} FUSE requests)",
                        v <= 1.5,
                    )
                )
    return out


def part(rd: dict[str, Any], fmt: Any) -> list[str]:
    """The report's section 2c."""
    rr = rd["repeated_read"]
    L = [
        "## 2c. Zero-message opens: default and read-only mounts, next to `--open-requests`",
        "",
        "The read commands of 2b on three mounts of the agent tree (writable with default "
        "options, writable with `--open-requests`, `--read-only`) and native; each command run "
        f"{rd['runs'] + 1} times, the first warming the caches. With zero-message opens "
        "memfs answers OPEN and OPENDIR (and, writable, FLUSH) with ENOSYS once (patched "
        "pyfuse3), so the kernel sends no OPEN, RELEASE, FLUSH, OPENDIR or RELEASEDIR "
        "again; the default on writable mounts since issue 37, which `--open-requests` "
        "turns off (docs/reliability.md §3). Used in this run: read-only "
        f"{rd['zero_message_opens']}, default {rd.get('zero_message_writes')}.",
        "",
        "| command | native ms | memfs ms | --open-requests ms | read-only ms | "
        "memfs / native | --open-requests / native | read-only / native | memfs requests | "
        "--open-requests requests | read-only requests | memfs by handler |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rd["rows"].items():
        shown = shown_command(row["command"])
        L.append(
            f"| {name}: `{shown}` | {fmt(row['native_ms'], '.1f')} | "
            + " | ".join(fmt(row[f"{k}_ms"], ".1f") for k in MOUNTED)
            + " | "
            + " | ".join(fmt(row[f"{k}_vs_native"]) for k in MOUNTED)
            + " | "
            + " | ".join(fmt(row[f"{k}_requests"], ".0f") for k in MOUNTED)
            + f" | {by_handler(row.get('memfs_by_handler', {}))} |"
        )
    L += [
        "",
        f"Repeated reads: open+read+close of each of the {rr['files']:,} files, warm, "
        f"{READ_PASSES} passes interleaved, ops/s. Python's `open()` asks `isatty`: one "
        "FUSE_IOCTL a file that libfuse answers ENOTTY and no option removes.",
        "",
        "| reading with | native | memfs | --open-requests | read-only | memfs / native | "
        "--open-requests / native | read-only / native |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for how, label in (("python", "Python `open()`"), ("os", "`os.open`, `os.read`")):
        x = rr[how]
        L.append(
            f"| {label} | {fmt(x['native_ops'], ',.0f')} | "
            + " | ".join(fmt(x[f"{k}_ops"], ",.0f") for k in MOUNTED)
            + " | "
            + " | ".join(fmt(x[f"{k}_vs_native"]) for k in MOUNTED)
            + " |"
        )
    return [*L, ""]
