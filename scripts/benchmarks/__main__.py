"""`scripts/bench`: run the cases and sections asked for, write results.json and the report.

Selection: no --only/--section runs every built-in case and then every section; --only
names built-in cases (or sections), --section names sections. Only a full run of
everything rewrites docs/performance.md; the others leave their report in bench-out/.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.mount import lazy_unmount

from . import __doc__ as package_doc
from . import chart, sections
from .cases import CASES, Bench
from .common import OUT, REPO, WORK, log, real_python_first
from .engines import cleanup_all
from .report import report, targets


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    rclone = subprocess.run(
        ["rclone", "version"], capture_output=True, text=True
    ).stdout.splitlines()[:1]
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "memfs"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    import anthropic

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "rclone": rclone[0] if rclone else "",
        "anthropic_sdk": anthropic.__version__,
        "workload_python3": shutil.which("python3") or "",
        "memfs_rev": rev + (" + uncommitted changes in memfs/" if dirty else ""),
        "loadavg_start": os.getloadavg(),
        "mem_total_mb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def fresh_workdir() -> None:
    """bench-out/work/ emptied, after detaching any mount a killed run left in it."""
    if WORK.exists():
        with open("/proc/self/mounts") as f:
            for line in f.read().splitlines():
                mp = line.split()[1]
                if mp.startswith(str(WORK)):
                    lazy_unmount(Path(mp))
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True)


def run(quick: bool, reps: int | None, cases: list[str], extra: list[str]) -> dict[str, Any]:
    t_start = time.perf_counter()
    fresh_workdir()
    results: dict[str, Any] = {"mode": "quick" if quick else "full", "machine": machine()}
    bench = Bench(quick, reps)
    bench.results = results
    try:
        if cases:
            bench.start()
            for name in cases:
                t0 = time.perf_counter()
                bench.run(name)
                results.setdefault("case_seconds", {})[name] = round(time.perf_counter() - t0, 1)
    finally:
        cleanup_all()
        bench.stop()
    for name in extra:
        results.setdefault("sections", {})[name] = sections.run(name, quick)
        cleanup_all()
    results["machine"]["loadavg_end"] = os.getloadavg()
    results["total_seconds"] = round(time.perf_counter() - t_start, 1)
    results["targets"] = targets(results)
    return results


def split(values: list[str] | None) -> list[str]:
    return [v for arg in values or [] for v in arg.split(",") if v]


def main() -> int:
    p = argparse.ArgumentParser(
        prog="scripts/bench", description=(package_doc or "").split("\n\n")[0]
    )
    p.add_argument("--quick", action="store_true", help="fewer files and repeats (about 8 min)")
    p.add_argument("--reps", type=int, help="repeats of the per-operation case")
    p.add_argument(
        "--only", action="append", help=f"comma list of cases: {','.join(CASES)} (or section names)"
    )
    p.add_argument(
        "--section", action="append", help="comma list of plugged-in sections to run (see --list)"
    )
    p.add_argument("--list", action="store_true", help="name the cases and sections, then exit")
    p.add_argument("--no-doc", action="store_true", help="do not rewrite docs/performance.md")
    p.add_argument("--out", default=str(OUT / "results.json"))
    args = p.parse_args()
    os.chdir(REPO)
    os.environ["PATH"] = real_python_first(os.environ.get("PATH", ""))
    found = sections.available()
    if args.list:
        print("cases:    " + " ".join(CASES))
        print("sections: " + (" ".join(sections.runnable(found, strict=False)) or "(none)"))
        return 0
    only, wanted = split(args.only), split(args.section)
    for name in only + wanted:
        if name not in CASES and name not in found:
            print(
                f"memfs bench: no case or section {name!r} (cases: {', '.join(CASES)}; "
                f"sections: {', '.join(found) or 'none'})",
                file=sys.stderr,
            )
            return 2
    everything = not only and not wanted
    cases = [c for c in CASES if everything or c in only]
    try:
        extra = sections.runnable(
            [s for s in found if everything or s in only + wanted], strict=not everything
        )
    except LookupError as e:
        print(f"memfs bench: {e}", file=sys.stderr)
        return 2
    results = run(args.quick, args.reps, cases, extra)
    OUT.mkdir(exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    # Only a full run of everything rewrites the committed summary and its chart; --quick,
    # --only and --section runs leave both in bench-out/.
    page = (
        REPO / "docs" if not args.no_doc and everything and not args.quick else OUT
    ) / "performance.md"
    png = page.with_suffix(".png")
    try:
        why_not = chart.draw(results, png)
    except Exception as e:  # a chart must not cost the report of a 10-minute run
        why_not = f"drawing failed: {e!r}"
    if why_not:
        log(f"no chart: {why_not}")
        png.unlink(missing_ok=True)  # not last run's chart beside this run's tables
    page.write_text(report(results, None if why_not else png.name))
    for t in results["targets"]:
        log(f"{t['status']:>8}  {t['target']}: {t['measured']}")
    failed = [n for n, e in results.get("sections", {}).items() if e.get("error")]
    if failed:
        log(f"sections that failed: {', '.join(failed)}")
    log(f"done in {results['total_seconds']:.0f}s; results in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
