"""The six built-in cases of issue 7, run side by side against one seeded `memfs serve`.

  1. per-operation on 2,000 files of 1 KiB: native dir / memfs (default options, and
     `--open-requests`) / rclone mount
  2. a fixed, deterministic 300-command agent workload over a 1,000-file tree: the same,
     plus a mount with a session store's options (`MEMFS_KINDS`)
  2b. each kind of agent command alone, warm: its FUSE requests (memfs counts them by
     handler, `memfs status`) and its time next to native
  2c. the read commands on a default and a `--read-only` mount (zero-message opens), one
     with `--open-requests`, and native (`readonly.py`)
  3. mount readiness at 100 / 1,000 / 10,000 memories, cold and warm cache, next to the
     reference worker's download
  4. idle sync cost at 10,000 memories (requests, bytes, CPU ms per pass), both engines
  5. flush of 2,000 dirty files by `memfs unmount`
  6. daemon peak RSS (VmHWM) with 10,000 memories mounted and read once

Each case fills its part of `Bench.results` (raw numbers and `summary()` cells), and
`Bench.run` adds the kernel's cache drops while it ran (/proc/vmstat `drop_pagecache`,
`drop_slab`: a shared VM may empty caches under a case); `report.py` turns them into
markdown.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from memfs.paths import ANTHROPIC_VERSION, BETA_MEMORY
from tests.support.api import Api
from tests.support.server import ServerProcess

from . import readonly, workloads
from .common import (
    OUT,
    REPO,
    WORK,
    churn_since,
    counts_since,
    hash_tree,
    log,
    proc_cpu_ms,
    proc_io,
    proc_sched_ns,
    proc_status_kb,
    read_all_cmd,
    requests_total,
    run_timed,
    summary,
    vmstat,
)
from .engines import MemfsMount, RcloneMount, RefWorker, start_server
from .proxy import CountingProxy

CASES = ("perop", "agent", "commands", "readonly", "readiness", "flush")  # readiness: also 4 and 6
ACTOR = ("api_actor", "apikey_bench")
# The memfs kinds: the suffix of their stores' names, and their extra `memfs mount` flags.
#  - memfs: default options (zero-message opens on a writable mount since issue 37);
#  - memfs_open: `--open-requests`, the opt-out (OPEN/RELEASE/FLUSH as before issue 37);
#  - memfs_ses: one `memfs mount` with the options a `memfs session` gives its writable
#    stores (what the SDK worker adapter mounts): xattr requests answer ENOSYS, the rest
#    default. A single mount, not a session process. Of the flags the adapter passes
#    (memfs/worker/engine.py) the harness keeps its own sync interval and leaves out
#    `--deletes-when-asked`, which holds deletes until the adapter asks for them
#    (sync_if_due, finish): the harness's `memfs unmount` does not.
MEMFS_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "memfs": ("", ()),
    "memfs_open": ("_open", ("--open-requests",)),
    "memfs_ses": ("_ses", ("--no-xattrs",)),
}
# Case 2 (agent workload) runs every kind; case 1 (per-operation) leaves out the session
# store's options (its per-op costs differ from the default's by the xattr requests).
KINDS = ["native", "memfs", "memfs_open", "memfs_ses", "rclone"]
PEROP_KINDS = ["native", "memfs", "memfs_open", "rclone"]
# How each kind is named in the report and the chart.
LABELS = {
    "native": "native",
    "memfs": "memfs (default)",
    "memfs_open": "memfs --open-requests",
    "memfs_ses": "session store (worker adapter's options)",
    "rclone": "rclone",
}


def rotated(rep: int, kinds: list[str] = KINDS) -> list[str]:
    """The engines in a different order each repeat, so drift hits all alike."""
    shift = rep % len(kinds)
    return kinds[shift:] + kinds[:shift]


class Bench:
    def __init__(self, quick: bool, reps: int | None) -> None:
        self.quick = quick
        # --quick is a smoke run of every case at smaller sizes (about 8 minutes); the
        # targets are then judged at the sizes it measured, which the report names.
        self.reps = reps or (2 if quick else 3)
        self.n_perop = 200 if quick else 2000
        self.ready_sizes = [1000] if quick else [100, 1000, 10000]
        self.agent_commands = 100 if quick else workloads.AGENT_COMMANDS
        self.idle_passes = 3 if quick else 5
        self.n_flush = 500 if quick else 2000
        self.flush_reps = 1 if quick else 2
        self.agent_reps = 1 if quick else 3

        self.results: dict[str, Any] = {}
        self.server: ServerProcess | None = None
        self.proxy: CountingProxy | None = None
        self.ref: RefWorker | None = None
        self.stores: dict[str, str] = {}
        self.items: dict[str, list[tuple[str, str]]] = {}
        self.counter = 0

    def ready_reps(self, n: int) -> int:
        if self.quick:
            return 1
        return 2 if n >= 10000 else 3

    def fresh(self, name: str) -> Path:
        self.counter += 1
        p = WORK / f"{name}-{self.counter}"
        p.mkdir(parents=True)
        return p

    # -- setup -----------------------------------------------------------------------
    def seed(self) -> None:
        from memfs.server.sqlite import Database

        t0 = time.perf_counter()
        db = Database.open(WORK / "store.db")

        def store(name: str, items: list[tuple[str, str]]) -> None:
            sid = db.create_store(name, "bench", {})["id"]
            if items:
                db.bulk_create_memories(sid, items, ACTOR)
            self.stores[name] = sid

        for n in self.ready_sizes:
            self.items[f"ready{n}"] = workloads.tree_items(n, seed=n)
            store(f"ready{n}", self.items[f"ready{n}"])
        self.items["agent"] = workloads.agent_tree_items(seed=1)
        for r in range(self.agent_reps):
            for suffix, _ in MEMFS_KINDS.values():
                store(f"agent{suffix}{r}", self.items["agent"])
        store("commands", self.items["agent"])
        store("readonly", self.items["agent"])
        for r in range(self.reps):
            for kind in PEROP_KINDS:
                if kind in MEMFS_KINDS:
                    store(f"perop{MEMFS_KINDS[kind][0]}{r}", [])
        for r in range(self.flush_reps):
            store(f"flush{r}", [])
            store(f"floor{r}", [])
        log(
            f"seeded {sum(len(v) for k, v in self.items.items() if k != 'agent')} + "
            f"{self.agent_reps}x1000 memories in {time.perf_counter() - t0:.1f}s"
        )

    def start(self) -> None:
        """Seed the store database, then serve it behind the counting proxy."""
        self.seed()
        self.server = start_server(WORK / "store.db", WORK / "server.log")
        self.proxy = CountingProxy(self.server.port)
        log(f"server {self.server.url}, counting proxy {self.proxy.url}")

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
        if self.server is not None:
            self.server.stop(timeout=15)

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    def memfs(
        self,
        store: str,
        name: str,
        *,
        url: str | None = None,
        cache: Path | None = None,
        interval: float = 15.0,
        extra: tuple[str, ...] = (),
    ) -> MemfsMount:
        base = self.fresh(name)
        return MemfsMount(
            self.stores[store],
            base / "mnt",
            cache or base / "cache",
            url or self.url,
            base / "memfs.log",
            interval=interval,
            extra=extra,
        )

    def rclone(self, name: str, items: list[tuple[str, str]] | None = None) -> RcloneMount:
        """An rclone mount of a fresh local folder holding `items`."""
        base = self.fresh(name)
        (base / "remote").mkdir()
        workloads.write_tree(base / "remote", items or [])
        return RcloneMount(base / "remote", base / "mnt", base / "cache", base / "rclone.log")

    def store_hashes(self, store_id: str) -> dict[str, str]:
        with Api(self.url, timeout=60) as api:
            return {
                m["path"]: m["content_sha256"]
                for m in api.list_memories(store_id)
                if m.get("type", "memory") == "memory"
            }

    def run(self, name: str) -> None:
        """One case, with the kernel's cache drops while it ran (results["churn"])."""
        mark = vmstat()
        {
            "perop": self.case_perop,
            "agent": self.case_agent,
            "commands": self.case_commands,
            "readonly": lambda: readonly.run(self),
            "readiness": self.case_readiness,
            "flush": self.case_flush,
        }[name]()
        self.results.setdefault("churn", {})[name] = churn_since(mark)

    # -- case 1: per-operation -------------------------------------------------------
    def perop_once(self, kind: str, rep: int) -> tuple[dict[str, float], dict[str, dict[str, int]]]:
        mount: MemfsMount | RcloneMount | None = None
        if kind == "native":
            root = self.fresh("native-perop")
        elif kind in MEMFS_KINDS:
            suffix, extra = MEMFS_KINDS[kind]
            mount = self.memfs(f"perop{suffix}{rep}", f"{kind}-perop", extra=extra).start()
            root = mount.mountpoint
        else:
            mount = self.rclone("rclone-perop")
            mount.start()
            root = mount.mnt

        def remount() -> None:  # memfs: SIGTERM and restart on the same cache
            if mount is not None:
                mount.stop()
                mount.start()

        counts = mount.fuse_requests if isinstance(mount, MemfsMount) else None
        try:
            return workloads.perop(root, self.n_perop, remount, counts)
        finally:
            if mount is not None:
                mount.stop()

    def case_perop(self) -> None:
        log(f"case 1: per-operation, {self.n_perop} files x {self.reps} reps")
        raw: dict[str, list[dict[str, float]]] = {k: [] for k in PEROP_KINDS}
        reqs: dict[str, list[dict[str, dict[str, int]]]] = {
            k: [] for k in PEROP_KINDS if k in MEMFS_KINDS
        }
        churn = []
        for rep in range(self.reps):
            mark = vmstat()
            for kind in rotated(rep, PEROP_KINDS):
                times, counted = self.perop_once(kind, rep)
                raw[kind].append(times)
                if kind in MEMFS_KINDS:
                    reqs[kind].append(counted)
            churn.append(churn_since(mark))
            log(
                f"  rep {rep}: "
                + ", ".join(
                    f"{k} create={raw[k][-1]['create_write_close']:.0f}/s" for k in PEROP_KINDS
                )
            )
        table: dict[str, Any] = {}
        for op in raw["native"][0]:
            row: dict[str, Any] = {k: summary([r[op] for r in raw[k]]) for k in PEROP_KINDS}
            for k in PEROP_KINDS[1:]:
                if op.endswith("_ms"):  # time: ratio = native/x so > 1 is faster, like ops/s
                    ratios = [raw["native"][i][op] / raw[k][i][op] for i in range(self.reps)]
                else:
                    ratios = [raw[k][i][op] / raw["native"][i][op] for i in range(self.reps)]
                row[f"{k}_vs_native"] = summary(ratios)
            # memfs FUSE requests per operation (the last repeat; they barely vary), by
            # handler, and the repeats' totals
            for k, runs in reqs.items():
                row[f"{k}_requests_per_op"] = {
                    h: round(v / self.n_perop, 2)
                    for h, v in runs[-1].get(op, {}).items()
                    if h != "forget_inodes"
                }
                row[f"{k}_forgets"] = runs[-1].get(op, {}).get("forget_inodes", 0)
                row[f"{k}_requests_total"] = summary([requests_total(r.get(op, {})) for r in runs])
            table[op] = row
        self.results["perop"] = {
            "files": self.n_perop,
            "reps": self.reps,
            "ops": table,
            "churn_per_rep": churn,
        }

    # -- case 2: agent workload ------------------------------------------------------
    def agent_once(self, kind: str, rep: int, script: Path) -> dict[str, Any]:
        items = self.items["agent"]
        m: MemfsMount | None = None
        rc: RcloneMount | None = None
        if kind == "native":
            root = self.fresh("native-agent")
            workloads.write_tree(root, items)
        elif kind in MEMFS_KINDS:
            suffix, extra = MEMFS_KINDS[kind]
            m = self.memfs(f"agent{suffix}{rep}", f"{kind}-agent", extra=extra).start()
            m.wait_content()
            root = m.mountpoint
        else:
            rc = self.rclone("rclone-agent", items)
            rc.start()
            root = rc.mnt
        try:
            before = m.fuse_requests() if m is not None else {}
            t0 = time.perf_counter()
            r = subprocess.run(
                ["bash", str(script)],
                cwd=root,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                timeout=600,
            )
            wall = time.perf_counter() - t0
            counted = counts_since(before, m.fuse_requests()) if m is not None else {}
            fails = r.stderr.count("FAIL")
            tree = hash_tree(root)
        finally:
            if rc is not None:
                rc.stop()
        out: dict[str, Any] = {
            "wall_s": wall,
            "failed_commands": fails,
            "tree": tree,
            "fuse_requests": counted,
        }
        if m is not None:
            t0 = time.perf_counter()
            u = m.cli("unmount", str(m.mountpoint), timeout=300)
            out["unmount_s"] = time.perf_counter() - t0
            out["unmount_rc"] = u.returncode
            m.stop()
            out["store"] = self.store_hashes(self.stores[f"agent{MEMFS_KINDS[kind][0]}{rep}"])
        return out

    def case_agent(self) -> None:
        log(
            f"case 2: agent workload, {self.agent_commands} commands over 1,000 files x "
            f"{self.agent_reps} reps"
        )
        script = OUT / "agent-workload.sh"
        script.write_text(workloads.agent_script(self.items["agent"], self.agent_commands))
        raw: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
        for rep in range(self.agent_reps):
            for kind in rotated(rep):
                raw[kind].append(self.agent_once(kind, rep, script))
            log(
                "  rep {}: {}".format(
                    rep, ", ".join(f"{k} {raw[k][-1]['wall_s']:.2f}s" for k in KINDS)
                )
            )
        ref_tree = raw["native"][0]["tree"]
        res: dict[str, Any] = {
            "commands": self.agent_commands,
            "files": 1000,
            "reps": self.agent_reps,
            "script": str(script.relative_to(REPO)),
        }
        for k in KINDS:
            res[k] = {
                "wall_s": summary([r["wall_s"] for r in raw[k]]),
                "failed_commands": [r["failed_commands"] for r in raw[k]],
                "tree_matches_native": all(r["tree"] == ref_tree for r in raw[k]),
            }
            if k != "native":
                res[k]["vs_native"] = summary(
                    [
                        raw[k][i]["wall_s"] / raw["native"][i]["wall_s"]
                        for i in range(self.agent_reps)
                    ]
                )
        for k in MEMFS_KINDS:
            res[k]["store_matches_native_after_unmount"] = all(
                r["store"] == ref_tree for r in raw[k]
            )
            res[k]["unmount_s"] = summary([r["unmount_s"] for r in raw[k]])
            res[k]["requests"] = summary([requests_total(r["fuse_requests"]) for r in raw[k]])
            res[k]["by_handler"] = raw[k][-1]["fuse_requests"]
        res["memfs_vs_rclone"] = summary(
            [raw["memfs"][i]["wall_s"] / raw["rclone"][i]["wall_s"] for i in range(self.agent_reps)]
        )
        self.results["agent"] = res

    # -- case 2b: one command at a time ------------------------------------------------
    def case_commands(self) -> None:
        """Each kind of agent command alone, warm: its FUSE requests and its time."""
        log(f"case 2b: {len(workloads.COMMANDS)} single commands, native and memfs")
        native = self.fresh("native-commands")
        workloads.write_tree(native, self.items["agent"])
        m = self.memfs("commands", "memfs-commands").start()
        try:
            m.wait_content()
            rows: dict[str, Any] = {}
            for name, template in workloads.COMMANDS:
                times: dict[str, list[float]] = {"native": [], "memfs": []}
                counted: list[dict[str, int]] = []
                mark = vmstat()
                for n in range(workloads.COMMAND_RUNS):
                    cmd = template.format(n=n + 10)
                    for kind, root in (("native", native), ("memfs", m.mountpoint)):
                        before = m.fuse_requests() if kind == "memfs" else {}
                        t = run_timed(["bash", "-c", cmd], cwd=root, timeout=120)
                        if n == 0:
                            continue  # warming the caches
                        times[kind].append(t * 1000)
                        if kind == "memfs":
                            counted.append(counts_since(before, m.fuse_requests()))
                last = counted[-1]
                rows[name] = {
                    "command": template.replace("{n:02d}", "{n}").format(n="N"),
                    "native_ms": summary(times["native"]),
                    "memfs_ms": summary(times["memfs"]),
                    "vs_native": summary(
                        [a / b for a, b in zip(times["memfs"], times["native"], strict=True)]
                    ),
                    "requests": summary([requests_total(c) for c in counted]),
                    "by_handler": last,
                    "churn": churn_since(mark),
                }
            self.results["commands"] = {"runs": workloads.COMMAND_RUNS - 1, "rows": rows}
        finally:
            m.stop()

    # -- cases 3, 4, 6: readiness, idle sync, memory -----------------------------------
    def readiness_memfs(self, m: MemfsMount) -> dict[str, Any]:
        assert self.proxy is not None
        mark = self.proxy.mark()
        t_mount = m.start().ready_s
        t0 = time.perf_counter() - t_mount
        run_timed(["ls", "-R", str(m.mountpoint)])
        t_ls = time.perf_counter() - t0
        run_timed(read_all_cmd(m.mountpoint), shell=True)
        t_read = time.perf_counter() - t0
        traffic = self.proxy.since(mark)
        hwm = proc_status_kb(m.pid, "VmHWM")
        return {
            "mounted_s": t_mount,
            "ls_R_s": t_ls,
            "read_all_s": t_read,
            "requests": traffic["requests"],
            "bytes_down": traffic["bytes_down"],
            "content_downloads": traffic["content_downloads"],
            "by_kind": traffic["by_kind"],
            "vmhwm_mb": hwm / 1024,
        }

    def readiness_ref(self, n: int) -> dict[str, Any]:
        assert self.proxy is not None and self.ref is not None
        root = self.fresh(f"ref{n}") / "memory"
        mark = self.proxy.mark()
        answer = self.ref.download(self.stores[f"ready{n}"], root)
        t_dl = answer["wall_s"]
        t_ls = t_dl + run_timed(["ls", "-R", str(root)])
        t_read = t_ls + run_timed(read_all_cmd(root), shell=True)
        traffic = self.proxy.since(mark)
        files = sum(1 for _ in root.rglob("*") if _.is_file()) - 1
        return {
            "download_s": t_dl,
            "download_cpu_ms": answer["cpu_ms"],
            "ls_R_s": t_ls,
            "read_all_s": t_read,
            "requests": traffic["requests"],
            "bytes_down": traffic["bytes_down"],
            "files": files,
        }

    def case_readiness(self) -> None:
        assert self.proxy is not None
        self.ref = RefWorker(self.proxy.url, WORK / "refworker.log")
        self.results["ref_worker_startup_s"] = self.ref.start()
        try:
            self._case_readiness()
        finally:
            self.ref.stop()

    def _case_readiness(self) -> None:
        assert self.proxy is not None
        log(
            f"case 3: mount readiness at {self.ready_sizes} (+ case 4 idle sync and case 6 RSS "
            f"at {self.ready_sizes[-1]:,})"
        )
        res: dict[str, Any] = {}
        for n in self.ready_sizes:
            cold: list[dict[str, Any]] = []
            warm: list[dict[str, Any]] = []
            ref: list[dict[str, Any]] = []
            keep_mount: MemfsMount | None = None
            reps = self.ready_reps(n)
            for rep in range(reps):
                last = rep == reps - 1
                m = self.memfs(f"ready{n}", f"memfs-ready{n}", url=self.proxy.url, interval=3600)
                try:
                    cold.append(self.readiness_memfs(m))
                    m.stop()
                    warm.append(self.readiness_memfs(m))
                finally:
                    if last and n == self.ready_sizes[-1]:
                        keep_mount = m
                    else:
                        m.stop()
                r = self.readiness_ref(n)
                ref.append(r)
                log(
                    f"  {n}: memfs cold ls-R {cold[-1]['ls_R_s']:.2f}s read "
                    f"{cold[-1]['read_all_s']:.2f}s, warm ls-R {warm[-1]['ls_R_s']:.2f}s "
                    f"(content downloads {warm[-1]['content_downloads']}), ref download "
                    f"{r['download_s']:.2f}s"
                )
            keys = [
                "mounted_s",
                "ls_R_s",
                "read_all_s",
                "requests",
                "bytes_down",
                "content_downloads",
                "vmhwm_mb",
            ]
            entry: dict[str, Any] = {
                "memfs_cold": {k: summary([c[k] for c in cold]) for k in keys},
                "memfs_warm": {k: summary([c[k] for c in warm]) for k in keys},
                "ref": {
                    k: summary([c[k] for c in ref])
                    for k in [
                        "download_s",
                        "download_cpu_ms",
                        "ls_R_s",
                        "read_all_s",
                        "requests",
                        "bytes_down",
                        "files",
                    ]
                },
                "by_kind_cold": cold[-1]["by_kind"],
                "by_kind_warm": warm[-1]["by_kind"],
            }
            for tag, runs in (("cold", cold), ("warm", warm)):
                entry[f"memfs_{tag}_ls_vs_ref_download"] = summary(
                    [runs[i]["ls_R_s"] / ref[i]["download_s"] for i in range(len(ref))]
                )
                entry[f"memfs_{tag}_read_all_vs_ref_read_all"] = summary(
                    [runs[i]["read_all_s"] / ref[i]["read_all_s"] for i in range(len(ref))]
                )
            res[str(n)] = entry
            if keep_mount is not None:
                try:
                    self.case_idle(keep_mount, n)
                    self.results["memory"] = {
                        "memories": n,
                        "vmhwm_mb_cold": summary([c["vmhwm_mb"] for c in cold]),
                        "vmhwm_mb_warm": summary([c["vmhwm_mb"] for c in warm]),
                        "vmrss_mb_after_idle": proc_status_kb(keep_mount.pid, "VmRSS") / 1024,
                        "vmhwm_mb_after_idle": proc_status_kb(keep_mount.pid, "VmHWM") / 1024,
                    }
                finally:
                    keep_mount.stop()
        self.results["readiness"] = res

    def case_idle(self, m: MemfsMount, n: int) -> None:
        assert self.proxy is not None and self.ref is not None
        log(f"case 4: idle sync at {n} memories, {self.idle_passes} passes each")
        m.wait_content()
        time.sleep(0.5)
        memfs_runs = []
        for _ in range(self.idle_passes):
            mark = self.proxy.mark()
            cpu0, ns0, io0 = proc_cpu_ms(m.pid), proc_sched_ns(m.pid), proc_io(m.pid)
            t0 = time.perf_counter()
            r = m.cli("sync", str(m.mountpoint), "--json", timeout=300)
            wall = time.perf_counter() - t0
            cpu1, ns1, io1 = proc_cpu_ms(m.pid), proc_sched_ns(m.pid), proc_io(m.pid)
            traffic = self.proxy.since(mark)
            answer = json.loads(r.stdout)
            store = answer["mounts"][0]["stores"][0]["last_pass"]  # `sync --json`
            memfs_runs.append(
                {
                    "requests": traffic["requests"],
                    "bytes_up": traffic["bytes_up"],
                    "bytes_down": traffic["bytes_down"],
                    "cpu_ms": cpu1 - cpu0,
                    "cpu_ms_schedstat": (ns1 - ns0) / 1e6,
                    "wall_s": wall,
                    "pass_s": store.get("duration_s"),
                    "pulled": store.get("pulled"),
                    "pushed": store.get("pushed"),
                    "file_read_bytes_est": max(
                        0, (io1["rchar"] - io0["rchar"]) - traffic["bytes_down"] - 4096
                    ),
                    "read_syscalls": io1["syscr"] - io0["syscr"],
                    "by_kind": traffic["by_kind"],
                }
            )
        ref_runs = []
        for _ in range(self.idle_passes):
            mark = self.proxy.mark()
            answer = self.ref.sync()
            traffic = self.proxy.since(mark)
            ref_runs.append(
                {
                    "requests": traffic["requests"],
                    "bytes_up": traffic["bytes_up"],
                    "bytes_down": traffic["bytes_down"],
                    "cpu_ms": answer["cpu_ms"],
                    "wall_s": answer["wall_s"],
                    "by_kind": traffic["by_kind"],
                }
            )
        keys = ["requests", "bytes_up", "bytes_down", "cpu_ms", "wall_s"]

        def over(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
            return summary([r[key] for r in runs])

        self.results["idle"] = {
            "memories": n,
            "passes": self.idle_passes,
            "request_budget": math.ceil(n / 100),
            "memfs": {
                **{k: over(memfs_runs, k) for k in keys},
                **{
                    k: over(memfs_runs, k)
                    for k in ("cpu_ms_schedstat", "pass_s", "file_read_bytes_est")
                },
                "pulled": [r["pulled"] for r in memfs_runs],
                "pushed": [r["pushed"] for r in memfs_runs],
                "by_kind": memfs_runs[-1]["by_kind"],
            },
            "ref": {**{k: over(ref_runs, k) for k in keys}, "by_kind": ref_runs[-1]["by_kind"]},
            "memfs_cpu_vs_ref": summary(
                [
                    memfs_runs[i]["cpu_ms"] / max(ref_runs[i]["cpu_ms"], 1e-9)
                    for i in range(self.idle_passes)
                ]
            ),
        }
        mr, rr = self.results["idle"]["memfs"], self.results["idle"]["ref"]
        log(
            f"  memfs: {mr['requests']['median']} requests, cpu {mr['cpu_ms']['median']:.0f} ms; "
            f"ref: {rr['requests']['median']} requests, cpu {rr['cpu_ms']['median']:.0f} ms"
        )

    # -- case 5: flush ---------------------------------------------------------------
    def flush_once(self, rep: int) -> dict[str, Any]:
        assert self.proxy is not None
        m = self.memfs(f"flush{rep}", "memfs-flush", url=self.proxy.url, interval=3600)
        m.start()
        try:
            t_write = workloads.write_flush_files(m.mountpoint, self.n_flush)
            dirty = m.status().get("dirty")
            mark = self.proxy.mark()
            cpu0 = proc_cpu_ms(m.pid)
            t0 = time.perf_counter()
            u = m.cli("unmount", str(m.mountpoint), timeout=600)
            t_unmount = time.perf_counter() - t0
            traffic = self.proxy.since(mark)
            try:
                cpu = proc_cpu_ms(m.pid) - cpu0
            except OSError:
                cpu = float("nan")  # the daemon exited before we could look
            m.stop()
        finally:
            m.cleanup()
        stored = len(self.store_hashes(self.stores[f"flush{rep}"]))
        floor = self.server_floor(self.stores[f"floor{rep}"], self.n_flush)
        log(
            f"  rep {rep}: unmount {t_unmount:.2f}s, {traffic['requests']} requests, "
            f"{stored} memories stored; the same creates sent straight to the server "
            f"by 16 threads: {floor:.2f}s"
        )
        return {
            "write_s": t_write,
            "dirty_before": dirty,
            "unmount_s": t_unmount,
            "unmount_rc": u.returncode,
            "requests": traffic["requests"],
            "bytes_up": traffic["bytes_up"],
            "by_kind": traffic["by_kind"],
            "stored_after": stored,
            "cpu_ms": cpu,
            "server_floor_s": floor,
            "vs_floor": t_unmount / floor,
        }

    def case_flush(self) -> None:
        log(f"case 5: flush of {self.n_flush} dirty files by `memfs unmount` x {self.flush_reps}")
        runs = [self.flush_once(rep) for rep in range(self.flush_reps)]
        self.results["flush"] = {
            "files": self.n_flush,
            "reps": self.flush_reps,
            **{
                k: summary([r[k] for r in runs])
                for k in [
                    "unmount_s",
                    "requests",
                    "write_s",
                    "bytes_up",
                    "cpu_ms",
                    "server_floor_s",
                    "vs_floor",
                ]
            },
            "all_stored": all(r["stored_after"] == self.n_flush for r in runs),
            "unmount_rc": [r["unmount_rc"] for r in runs],
            "dirty_before": [r["dirty_before"] for r in runs],
            "by_kind": runs[-1]["by_kind"],
        }

    def server_floor(self, store_id: str, n: int) -> float:
        """The same creates straight to the server, 16 at a time: the server's own cost."""
        content = workloads.FLUSH_DATA.decode()
        headers = {"anthropic-version": ANTHROPIC_VERSION, "anthropic-beta": BETA_MEMORY}

        def worker(k: int) -> None:
            # raw httpx (no answer parsing), so the floor is the server's cost alone
            with httpx.Client(base_url=self.url, headers=headers, timeout=60) as c:
                for i in range(k, n, 16):
                    c.post(
                        f"/v1/memory_stores/{store_id}/memories",
                        json={"path": workloads.flush_path(i), "content": content},
                    ).raise_for_status()

        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            list(ex.map(worker, range(16)))
        return time.perf_counter() - t0
