"""Stock stress tools from Debian on a live mount, with a short budget.

- `stress-ng` file stressors that fit memfs's limits; its metrics are read, not only its
  exit code: every stressor must have done work (bogo ops > 0), and the only stressor
  allowed to give up is `link` (hard links are EPERM on memfs; stress-ng reports "link
  calls not allowed on the filesystem, skipping stressor").
- `fio` with `verify=crc32c` on small files (≤ 64 KiB each). fio writes binary data (its
  verify headers), which a memory refuses at the write (EILSEQ), so its files are
  excluded names (`--exclude`): local-only files take any bytes, through the same write
  path and journal; the verification reads them back through the mount and must pass
  with err=0, and none reaches the store.

`pytest --long tests/test_stress.py` runs each tool for minutes instead of seconds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.mount import MountProcess, mount_store, require_fuse
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(900)]


STRESSORS = ["dentry", "dir", "rename", "open", "fstat", "chmod", "utime", "link"]
# Stressors that cannot run on memfs, and the words stress-ng uses for it.
IMPOSSIBLE = {"link": "link calls not allowed on the filesystem, skipping stressor"}
METRIC = re.compile(r"^stress-ng: metrc: \[\d+\]\s+(\w+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+[\d.]+")


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{tool} is required under CI=true (scripts/install installs it)")
        pytest.skip(f"{tool} is not installed")
    return path


def budget(request: pytest.FixtureRequest, short: int, long: int) -> int:
    return long if request.config.getoption("--long") else short


def parse_metrics(text: str) -> dict[str, int]:
    """stressor -> bogo ops, from the `--metrics-brief` table."""
    ops: dict[str, int] = {}
    for line in text.splitlines():
        m = METRIC.match(line)
        if m:
            ops[m.group(1)] = int(m.group(2))
    return ops


def test_parse_metrics_reads_the_table() -> None:
    sample = (
        "stress-ng: metrc: [1] stressor       bogo ops real time  usr time  sys time\n"
        "stress-ng: metrc: [1]                           (secs)    (secs)    (secs)\n"
        "stress-ng: metrc: [1] dentry              270      8.24      0.04      0.15"
        "        32.78        1463.12\n"
        "stress-ng: metrc: [1] link                  0     12.23      0.08      0.54"
        "         0.08           1.62\n"
        "stress-ng: metrc: [1] dentry           9372104.54 nanosecs per file creation\n"
    )
    assert parse_metrics(sample) == {"dentry": 270, "link": 0}


def test_stress_ng_file_stressors(
    request: pytest.FixtureRequest, mount: MountProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    stress_ng = need("stress-ng")
    seconds = budget(request, 5, 300)
    work = mount.mountpoint / "stress"
    work.mkdir()
    # one instance of each: "--dentry 1 --dir 1 …"
    cmd = [stress_ng]
    for s in STRESSORS:
        cmd += [f"--{s}", "1"]
    cmd += ["--temp-path", str(work), "-t", str(seconds), "--metrics-brief"]
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=seconds * 4 + 60, cwd=mount.mountpoint.parent
    )
    out = result.stdout + result.stderr
    ops = parse_metrics(out)
    assert set(ops) == set(STRESSORS), out
    for name, count in ops.items():
        if name not in IMPOSSIBLE:
            assert count > 0, f"{name} did no work:\n{out}"
    for name, words in IMPOSSIBLE.items():
        assert words in out, f"{name} was expected to be refused:\n{out}"
    failed = [line for line in out.splitlines() if re.match(r"stress-ng: fail:", line)]
    assert failed == [], out
    # 3 is stress-ng's "a stressor had no resources": the skipped link stressor
    assert result.returncode in (0, 3), out
    aborted = re.findall(r"process \[\d+\] \((\w+)\) aborted early", out)
    assert set(aborted) <= set(IMPOSSIBLE), out
    assert "successful run completed" in out, out
    # the mount survived, stress-ng cleaned up after itself, and a pass is clean
    assert os.listdir(work) == []
    (mount.mountpoint / "after.md").write_text("still here\n")
    # Push soon uploaded the temporary files that lived past a settle; their deletes go
    # out at most 50 a pass (the delete cap), so a few passes empty the store of them.
    for _ in range(40):
        mount.sync()
        paths = [m["path"] for m in shared_api.list_memories(str(store["id"]))]
        if paths == ["/after.md"]:
            break
    assert paths == ["/after.md"]
    status = json.loads(mount.memfs("status", str(mount.mountpoint), "--json").stdout)
    assert status["mounts"][0]["stores"][0]["last_pass"]["outcome"] == "ok"
    log = mount.log()
    assert "unexpected error in handler" not in log and "Traceback" not in log


# fio's file names (`seqwrite.0.0`, `randwrite.1.3`, ...): excluded, so local-only.
FIO_FILES = "*write.*.*"
FIO_JOB = """
[global]
directory={directory}
ioengine=psync
verify=crc32c
do_verify=1
verify_fatal=1
verify_state_save=0
create_fsync=0
bs={bs}
size=64k
nrfiles=4
filesize=16k
{runtime}

[seqwrite]
rw=write

[randwrite]
rw=randwrite
bs=1k
numjobs=2

[readwrite]
rw=randrw
bs=2k
"""


@pytest.fixture
def unhurried_mount(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, object]
) -> Iterator[MountProcess]:
    """A mount without push soon, where fio's files are local-only (`FIO_FILES`)."""
    require_fuse()
    proc = mount_store(
        tmp_path, shared_server.url, str(store["id"]), "--no-push-soon", "--exclude", FIO_FILES
    )
    try:
        yield proc
    finally:
        proc.cleanup()


def test_fio_verify_crc32c_small_files(
    request: pytest.FixtureRequest,
    unhurried_mount: MountProcess,
    shared_api: Api,
    store: dict[str, Any],
    tmp_path: Path,
) -> None:
    mount = unhurried_mount
    fio = need("fio")
    long = request.config.getoption("--long")
    work = mount.mountpoint / "fio"
    work.mkdir()
    job = tmp_path / "verify.fio"
    job.write_text(
        FIO_JOB.format(
            directory=work, bs="4k", runtime="time_based=1\nruntime=120" if long else "loops=3"
        )
    )
    result = subprocess.run(
        [fio, "--output-format=json", str(job)],
        capture_output=True,
        text=True,
        timeout=600 if long else 120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    report = json.loads(result.stdout[result.stdout.index("{") :])
    jobs = report["jobs"]
    assert sorted(j["jobname"] for j in jobs) == ["randwrite", "randwrite", "readwrite", "seqwrite"]
    for j in jobs:
        assert j["error"] == 0, j
        assert j["write"]["io_bytes"] > 0, j
        # verification read everything back through the mount
        assert j["read"]["io_bytes"] > 0, j
    assert "verify" not in result.stderr.lower() or "bad" not in result.stderr.lower()
    files = sorted(work.iterdir())
    assert len(files) == 4 * 4  # 4 jobs (randwrite runs twice) × 4 files
    for f in files:
        assert f.stat().st_size == 16 * 1024
    # local-only: never sent, and nothing held back (`memfs sync` exits 0)
    mount.sync()
    assert [m["path"] for m in shared_api.list_memories(str(store["id"]))] == []
    assert mount.mount_status()["stores"][0]["refused_files"] == []
