"""The control channel between the CLI and a live daemon: a Unix socket per mount.

Each daemon registers itself in a per-user runtime directory (`$XDG_RUNTIME_DIR/memfs`,
else `/tmp/memfs-<uid>`): `<key>.sock` to talk to, `<key>.json` describing the mount.
A request is one JSON line (`{"op": "status" | "sync" | "flush" | "restore" | "unmount"
| "history" | "conflicts"}`; `flush` and `restore` serve the SDK worker adapter,
memfs/worker/engine.py, `history` and `conflicts` the commands of
memfs/cli/history_commands.py), the answer is one JSON line. The CLI side is plain
blocking sockets: it never needs an event loop.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from memfs.errors import ConfigError

log = logging.getLogger("memfs.control")

# A peer that connects and sends no full request line within this bound is dropped.
REQUEST_READ_TIMEOUT = 10.0
MAX_REQUEST = 1 << 20

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def runtime_dir() -> Path:
    """The per-user registry of live mounts; refused if someone else could plant files."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    path = Path(base) / "memfs" if base else Path(f"/tmp/memfs-{os.getuid()}")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.lstat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or not stat.S_ISDIR(st.st_mode):
        raise ConfigError(
            f"the runtime directory {path} is not a private directory of "
            "this user; remove it or set XDG_RUNTIME_DIR"
        )
    return path


def mount_key(real_mountpoint: str) -> str:
    return hashlib.sha256(real_mountpoint.encode()).hexdigest()[:20]


class ControlServer:
    """Serves one mount's control socket until cancelled; removes its files after."""

    def __init__(self, mountpoint: str, info: dict[str, Any], handler: Handler) -> None:
        # Already resolved by the caller: a daemon must never stat its own mount point
        # from the event loop, or the kernel's request back to it deadlocks.
        self.mountpoint = mountpoint
        key = mount_key(self.mountpoint)
        self.sock_path = runtime_dir() / f"{key}.sock"
        self.info_path = runtime_dir() / f"{key}.json"
        self.info = {
            **info,
            "mountpoint": self.mountpoint,
            "pid": os.getpid(),
            "socket": str(self.sock_path),
        }
        self.handler = handler
        self._in_flight = 0
        self._idle = trio.Event()
        self._idle.set()

    async def wait_idle(self) -> None:
        """Until every request received so far has had its answer sent."""
        await self._idle.wait()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.sock_path.unlink(missing_ok=True)
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        await sock.bind(str(self.sock_path))
        os.chmod(self.sock_path, 0o600)
        sock.listen(16)
        tmp = self.info_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.info))
        tmp.replace(self.info_path)
        try:
            task_status.started()
            await trio.serve_listeners(self._serve_one, [trio.SocketListener(sock)])
        finally:
            self.sock_path.unlink(missing_ok=True)
            self.info_path.unlink(missing_ok=True)

    async def _serve_one(self, stream: trio.SocketStream) -> None:
        self._in_flight += 1
        self._idle = trio.Event()
        try:
            await self._answer(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
            # The peer timed out, was interrupted (Ctrl-C) or hung up: its request (a
            # sync pass, an unmount) goes on; only the answer has nowhere to go.
            log.info(
                "control peer went away before its answer mountpoint=%s error=%s",
                self.mountpoint,
                type(e).__name__,
            )
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def _answer(self, stream: trio.SocketStream) -> None:
        async with stream:
            buf = b""
            with trio.move_on_after(REQUEST_READ_TIMEOUT):
                while not buf.endswith(b"\n") and len(buf) <= MAX_REQUEST:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        break
                    buf += chunk
            if not buf.endswith(b"\n"):
                if buf:
                    log.warning(
                        "control request dropped: incomplete or too long "
                        "mountpoint=%s max_bytes=%d",
                        self.mountpoint,
                        MAX_REQUEST,
                    )
                return
            try:
                request = json.loads(buf)
                if not isinstance(request, dict):
                    raise ValueError("request must be an object")
                answer = await self.handler(request)
            except Exception as e:  # a bad request must not end the daemon
                log.warning("control request failed error=%s", e)
                answer = {"ok": False, "error": str(e)}
            await stream.send_all(json.dumps(answer).encode() + b"\n")


def registered_mounts() -> list[dict[str, Any]]:
    """Every registered mount, `alive` or not. The entry of a killed daemon is kept
    while its dead mount is still there (it explains it); other stale ones are removed."""
    from memfs.control.recovery import is_dead_mount

    found = []
    for info_path in sorted(runtime_dir().glob("*.json")):
        try:
            info = json.loads(info_path.read_text())
            pid = int(info.get("pid", 0))
            if not isinstance(info, dict):
                continue
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        info["alive"] = pid > 0 and pid_alive(pid)
        if not info["alive"] and not is_dead_mount(str(info.get("mountpoint", ""))):
            info_path.unlink(missing_ok=True)
            Path(str(info.get("socket", ""))).unlink(missing_ok=True)
            continue
        found.append(info)
    return found


def live_mounts() -> list[dict[str, Any]]:
    """Every registered mount whose daemon is still running."""
    return [info for info in registered_mounts() if info["alive"]]


def _containing(path: str, infos: list[dict[str, Any]]) -> dict[str, Any] | None:
    real = os.path.realpath(path)
    best: dict[str, Any] | None = None
    for info in infos:
        mp = str(info["mountpoint"])
        if (real == mp or real.startswith(mp.rstrip("/") + "/")) and (
            best is None or len(mp) > len(str(best["mountpoint"]))
        ):
            best = info
    return best


def find_dead_mount(path: str) -> dict[str, Any] | None:
    """The registered mount containing `path` whose daemon is gone."""
    return _containing(path, [i for i in registered_mounts() if not i["alive"]])


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie waiting to be reaped is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def find_mount(path: str) -> dict[str, Any] | None:
    """The live mount that contains `path` (the deepest one)."""
    return _containing(path, live_mounts())


def request(info: dict[str, Any], op: str, timeout: float = 60.0, **fields: Any) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(info["socket"]))
        sock.sendall(json.dumps({"op": op, **fields}).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
    try:
        answer = json.loads(buf) if buf else {"ok": False, "error": "no answer"}
    except ValueError:
        return {"ok": False, "error": "the daemon sent a broken answer"}
    if not isinstance(answer, dict):
        return {"ok": False, "error": "bad answer"}
    return answer
