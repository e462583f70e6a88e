"""`mount -t fuse.memfs`, fstab lines and umount(8), through the real mount(8): its helper
/sbin/mount.fuse.memfs (linked by scripts/install) and fuse3's mount.fuse for the
`memfs#STORE_ID` form. The fstab lines and commands are docs/operations.md's examples,
with only the store id and the host's paths replaced."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.deadline import eventually
from tests.support.files import store_files
from tests.support.mount import is_mounted, lazy_unmount, unmount_from_outside
from tests.support.server import ServerProcess
from tests.support.units import BIN, example

pytestmark = pytest.mark.deadline(240)

HELPER = Path("/sbin/mount.fuse.memfs")
DOC_STORE = "memstore_01…"


def _need_mount8() -> None:
    problem = None
    if os.getuid() != 0:
        problem = "mount(8) with a helper needs root here"
    elif shutil.which("mount") is None or shutil.which("umount") is None:
        problem = "mount(8)/umount(8) are not installed"
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(problem)
    pytest.skip(problem)


def _need_helper() -> None:
    """mount(8) looks in /sbin only, so the helper must be this checkout's."""
    ours = BIN / "mount.fuse.memfs"
    assert os.path.realpath(HELPER) == os.path.realpath(ours), (
        f"{HELPER} is not this checkout's helper ({os.path.realpath(HELPER)}); "
        f"run scripts/install here"
    )


class Host:
    def __init__(self, tmp: Path, url: str, store: str) -> None:
        self.tmp = tmp
        self.store = store
        self.mountpoint = tmp / "prefs"
        self.mountpoint.mkdir()
        self.env_file = tmp / "prefs.env"
        self.cache = tmp / "cache-prefs"
        # The docs' env file, with this server's URL: its keys as written.
        lines = []
        for line in example("fstab env").splitlines():
            if line.startswith("ANTHROPIC_API_KEY="):
                lines.append("ANTHROPIC_API_KEY=anything")
            elif line.startswith("ANTHROPIC_BASE_URL="):
                lines.append(f"ANTHROPIC_BASE_URL={url}")
            else:
                lines.append(line)
        self.env_file.write_text("\n".join(lines) + "\n")
        self.env_file.chmod(0o600)

    def place(self, text: str) -> str:
        """A docs example with this host's store and paths."""
        for old, new in (
            (DOC_STORE, self.store),
            ("/mnt/prefs", str(self.mountpoint)),
            ("/etc/memfs/prefs.env", str(self.env_file)),
            ("/var/cache/memfs/prefs", str(self.cache)),
            ("/opt/memfs/.venv/bin/memfs", str(BIN / "memfs")),
        ):
            text = text.replace(old, new)
        return text

    def fstab(self, name: str) -> Path:
        path = self.tmp / f"{name}.fstab"
        path.write_text(self.place(example(name)))
        return path


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=120,
        env=env if env is not None else boot_env(),
    )


def boot_env() -> dict[str, str]:
    """What mount(8) sees at boot: no HOME, no XDG_RUNTIME_DIR, no credentials."""
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def shell_env() -> dict[str, str]:
    """A root login shell of a systemd host: it sets XDG_RUNTIME_DIR (the docs' command
    clears it)."""
    return {
        "PATH": f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "XDG_RUNTIME_DIR": "/run/user/0",
    }


def mount_source(mountpoint: Path) -> tuple[str, str]:
    done = run("findmnt", "-n", "-o", "SOURCE,FSTYPE", str(mountpoint))
    source, fstype = done.stdout.split()
    return source, fstype


def daemon_pid(mountpoint: Path) -> int:
    done = run(
        str(BIN / "memfs"),
        "status",
        str(mountpoint),
        "--json",
        env={**boot_env(), "XDG_RUNTIME_DIR": ""},
    )
    assert done.returncode == 0, done.stderr
    return int(json.loads(done.stdout)["mounts"][0]["pid"])


def wait_gone(pid: int, bound: float = 90.0) -> None:
    """The daemon exits after its final sync (bounded by the flush timeout)."""
    eventually(
        lambda: not os.path.exists(f"/proc/{pid}"),
        f"daemon {pid} gone",
        timeout=bound,
        interval=0.1,
    )


@pytest.fixture
def host(tmp_path: Path, shared_server: ServerProcess, shared_api: Api) -> Iterator[Host]:
    _need_mount8()
    store = shared_api.create_store("Prefs in fstab")["id"]
    shared_api.create_memory(store, "/style.md", "terse\n")
    h = Host(tmp_path, shared_server.url, store)
    try:
        yield h
    finally:
        lazy_unmount(h.mountpoint)
        # the docs' lines without cache_dir= use the user's ~/.cache/memfs/STORE_ID
        shutil.rmtree(
            Path(pwd.getpwuid(os.getuid()).pw_dir, ".cache", "memfs", store), ignore_errors=True
        )


def test_fstab_line_mount_a_and_umount(host: Host, shared_api: Api) -> None:
    """The docs' fstab line, as at boot: `mount -a` mounts it, a second `mount -a` sees it
    is mounted, the docs' status command finds it, umount(8) pushes the last change."""
    _need_helper()
    fstab = host.fstab("fstab")
    first = run("mount", "-a", "-T", str(fstab))
    assert first.returncode == 0, first.stderr
    assert is_mounted(host.mountpoint)
    assert mount_source(host.mountpoint) == (host.store, "fuse.memfs")
    assert (host.mountpoint / "style.md").read_text() == "terse\n"
    again = run("mount", "-a", "-T", str(fstab))
    assert again.returncode == 0, again.stderr
    with open("/proc/self/mounts") as f:
        assert sum(line.split()[1] == str(host.mountpoint) for line in f) == 1
    (status_line,) = [c for c in example("mount commands").splitlines() if " status " in c]
    command = host.place(status_line).split("  #")[0].strip()
    status = run("bash", "-c", command + " --json", env=shell_env())
    assert status.returncode == 0, status.stderr
    (store,) = json.loads(status.stdout)["mounts"][0]["stores"]
    assert store["memory_store_id"] == host.store
    assert (host.cache / "journal.sqlite").exists()
    assert (host.cache / "memfs.log").exists()  # a --daemon mount logs to its cache

    pid = daemon_pid(host.mountpoint)
    (host.mountpoint / "from-fstab.md").write_text("written before umount\n")
    done = unmount_from_outside("umount", str(host.mountpoint), env=boot_env())
    assert done.returncode == 0, done.stderr
    wait_gone(pid)
    assert not is_mounted(host.mountpoint)
    assert store_files(shared_api, host.store) == {
        "style.md": "terse\n",
        "from-fstab.md": "written before umount\n",
    }


def test_mount_t_fuse_memfs_by_mountpoint_and_options(host: Host, shared_api: Api) -> None:
    """`mount MOUNTPOINT` looks the line up; the docs' `mount -t fuse.memfs … -o ro,…`
    gives a read-only mount; `-f -v` prints the command and mounts nothing."""
    _need_helper()
    fstab = host.fstab("fstab")
    done = run("mount", "-T", str(fstab), str(host.mountpoint))
    assert done.returncode == 0, done.stderr
    assert is_mounted(host.mountpoint)
    pid = daemon_pid(host.mountpoint)
    assert run("umount", str(host.mountpoint)).returncode == 0
    wait_gone(pid)

    (line,) = [c for c in example("mount commands").splitlines() if " -t fuse.memfs " in c]
    argv = host.place(line).split()
    assert argv[:2] == ["sudo", "mount"]
    fake = run(*argv[1:2], "-f", "-v", *argv[2:])
    assert fake.returncode == 0, fake.stderr
    assert f"would run: memfs mount {host.store} {host.mountpoint} --daemon" in fake.stderr
    assert "--read-only" in fake.stderr and not is_mounted(host.mountpoint)

    done = run(*argv[1:])
    assert done.returncode == 0, done.stderr
    with pytest.raises(OSError) as refused:
        (host.mountpoint / "new.md").write_text("no\n")
    assert refused.value.strerror == "Read-only file system"
    pid = daemon_pid(host.mountpoint)
    assert run("umount", str(host.mountpoint)).returncode == 0
    wait_gone(pid)
    assert store_files(shared_api, host.store) == {"style.md": "terse\n"}


def test_refusals_keep_memfs_exit_codes(host: Host) -> None:
    """mount(8) passes the helper's exit code through, with memfs's one-line reason."""
    _need_helper()
    base = ["mount", "-t", "fuse.memfs", host.store, str(host.mountpoint), "-o"]
    bogus = run(*base, f"env_file={host.env_file},noexec")
    assert bogus.returncode == 2
    assert "memfs: unknown mount option 'noexec' (see mount.fuse.memfs(8))" in bogus.stderr
    bare = run(*base, f"env_file={host.env_file},sync_interval")
    assert bare.returncode == 2
    assert "mount option 'sync_interval': write it as sync_interval=SECONDS" in bare.stderr
    short = run(*base, f"env_file={host.env_file},sync_interval=1")
    assert short.returncode == 2 and "at least 5 seconds" in short.stderr
    down = run(*base, f"env_file={host.env_file},api_url=http://127.0.0.1:9,cache_dir={host.cache}")
    assert down.returncode == 3 and "cannot reach the store" in down.stderr
    missing = run(*base, f"env_file={host.tmp}/missing.env")
    assert missing.returncode == 2
    assert f"the env_file {host.tmp}/missing.env is not readable (No such file" in missing.stderr
    assert not is_mounted(host.mountpoint)
    sloppy = run(
        "mount", "-s", *base[1:], f"env_file={host.env_file},noexec,cache_dir={host.cache}"
    )
    assert sloppy.returncode == 0, sloppy.stderr
    assert "ignoring the unknown mount option 'noexec' (-s)" in sloppy.stderr
    pid = daemon_pid(host.mountpoint)
    assert run("umount", str(host.mountpoint)).returncode == 0
    wait_gone(pid)


def test_fuse3_mount_fuse_runs_memfs(host: Host, shared_api: Api) -> None:
    """The `memfs#STORE_ID` line of type fuse: fuse3's mount.fuse runs the memfs named
    before `#` as `memfs STORE_ID MOUNTPOINT -o OPTIONS`."""
    fstab = host.fstab("fstab fuse3")
    assert "#" in fstab.read_text().split()[0]
    done = run("mount", "-T", str(fstab), str(host.mountpoint))
    assert done.returncode == 0, done.stderr
    assert mount_source(host.mountpoint) == (host.store, "fuse.memfs")
    (host.mountpoint / "via-fuse3.md").write_text("mount.fuse\n")
    pid = daemon_pid(host.mountpoint)
    assert run("umount", str(host.mountpoint)).returncode == 0
    wait_gone(pid)
    assert store_files(shared_api, host.store) == {
        "style.md": "terse\n",
        "via-fuse3.md": "mount.fuse\n",
    }


def test_a_boot_without_home_uses_the_users_cache(host: Host) -> None:
    """mount(8) at boot has no HOME: the cache is still the user's ~/.cache/memfs/ID."""
    _need_helper()
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert "HOME" not in boot_env()
    done = run(
        "mount",
        "-t",
        "fuse.memfs",
        host.store,
        str(host.mountpoint),
        "-o",
        f"env_file={host.env_file}",
    )
    assert done.returncode == 0, done.stderr
    assert (home / ".cache" / "memfs" / host.store / "journal.sqlite").exists()
    assert f"logs: {home}/.cache/memfs/memfs.log" in done.stderr
    pid = daemon_pid(host.mountpoint)
    assert run("umount", str(host.mountpoint)).returncode == 0
    wait_gone(pid)
