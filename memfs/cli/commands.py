"""What `memfs mount | sync | status | unmount` do, behind the argument parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memfs.config import ExitCode
from memfs.control import protocol, registry
from memfs.control.client import request
from memfs.control.codec import to_wire
from memfs.control.protocol import A, ErrorAnswer, StatusAnswer, StoreStatus
from memfs.logs import plural

if TYPE_CHECKING:
    from memfs.config import MountConfig, StoreSpec


def _fail(message: str, code: int = ExitCode.FAILED) -> int:
    print(f"memfs: {message}", file=sys.stderr)
    return code


def _config(
    args: Any, mountpoint: str, store: StoreSpec, *, session_root: str | None = None
) -> MountConfig:
    """The options on the command line (memfs/cli/options.py) as a mount's config."""
    from memfs.cli.options import config_values
    from memfs.config import MountConfig

    values = config_values(args)
    return MountConfig(mountpoint=mountpoint, store=store, session_root=session_root, **values)


def mount(args: Any) -> int:
    # Imported here: `status`, `sync` and `unmount` stay quick without FUSE and HTTP.
    from memfs.config import StoreSpec
    from memfs.mount.launch import launch

    try:
        config = _config(args, args.mountpoint, StoreSpec(args.store_id, read_only=args.read_only))
    except ValueError as e:
        return _fail(str(e), ExitCode.USAGE)
    config.restart = _restart(args, config)
    return launch(config, daemonize=args.daemon)


def _restart(args: Any, config: MountConfig) -> str:
    """The command that starts this mount again, named by `status` if it dies."""
    from memfs.cli.options import restart_command
    from memfs.config import default_cache_root

    root = config.cache_dir or default_cache_root()
    s = config.store
    dirs = {
        s.store_id: os.path.abspath(
            root if (config.session_root is None and config.cache_dir) else root / s.store_id
        )
    }
    api_url = args.api_url or os.environ.get("ANTHROPIC_BASE_URL") or None
    where = config.session_root or config.mountpoint
    return restart_command(args, os.path.realpath(where), dirs, api_url)


def session(args: Any) -> int:
    from memfs.cli.options import config_values
    from memfs.errors import StartError
    from memfs.mount.launch import launch_session
    from memfs.mount.session import prepare

    try:
        config_values(args)  # a bad option is refused before the session is read
        if args.spec is not None and args.session_id is not None:
            raise ValueError("give either SPEC.json or --session-id, not both")
        session_id = args.session_id
        if args.spec is None and session_id is None:
            session_id = os.environ.get("ANTHROPIC_SESSION_ID", "").strip() or None
        args.session_id = session_id  # the restart hint names it
        root, stores = prepare(args.spec, args.root, args.api_url, dict(os.environ), session_id)
        configs = [
            _config(args, os.path.join(root, str(s.dir_name)), s, session_root=root) for s in stores
        ]
    except ValueError as e:
        return _fail(str(e), ExitCode.USAGE)
    except StartError as e:
        return _fail(str(e), e.exit_code)
    for config in configs:
        config.restart = _restart(args, config)
    for spec in stores:
        access = "read_only" if spec.read_only else "read_write"
        print(
            f"memfs: {spec.store_id} ({spec.name}) -> {root}/{spec.dir_name} [{access}]",
            file=sys.stderr,
        )
    return launch_session(configs, daemonize=args.daemon)


def _live_at(path: str) -> list[dict[str, Any]]:
    """The live mount containing `path`, or every mount of the session rooted there."""
    info = registry.find_mount(path)
    return [info] if info is not None else registry.session_mounts(path)


def _mounts_for(path: str) -> list[dict[str, Any]]:
    infos = _live_at(path)
    if not infos:
        print(f"memfs: no live memfs mount at {path}", file=sys.stderr)
    return infos


# What goes on in the daemon when its CLI peer stops waiting (timeout or Ctrl-C).
_GOES_ON = {
    "sync": "the sync pass goes on in the daemon",
    "push": "the upload goes on in the daemon",
    "unmount": "the daemon goes on with the final sync, then unmounts",
    "status": "the mount is not affected",
}


def _ask(
    path: str, req: protocol.Asks[A], timeout: float
) -> list[tuple[dict[str, Any], A | ErrorAnswer]] | int:
    """Each mount at `path` (a session's: all of them, side by side) and its daemon's
    answer to `op`, or the exit code of failing.

    Giving up on the answer (timeout, Ctrl-C) never affects the daemon: the request goes
    on there, and the message says so.
    """
    infos = _mounts_for(path)
    if not infos:
        return ExitCode.FAILED
    after = f"{_GOES_ON.get(req.op, 'the mount is not affected')} (see `memfs status {path}`)"
    try:
        if len(infos) == 1:
            with _progress(infos[0], req.op):
                return [(infos[0], request(infos[0], req, timeout=timeout))]
        with ThreadPoolExecutor(len(infos)) as pool:
            answers = list(pool.map(lambda i: request(i, req, timeout=timeout), infos))
        return list(zip(infos, answers, strict=True))
    except KeyboardInterrupt:
        return _fail(f"interrupted; {after}", ExitCode.INTERRUPTED)
    except TimeoutError:
        return _fail(f"the daemon did not answer within {timeout:g}s; {after}")
    except OSError as e:
        return _fail(f"the daemon did not answer: {e}")


def _progress(info: dict[str, Any], op: str) -> AbstractContextManager[None]:
    """On a terminal, what the daemon is doing while `op` waits (memfs/sync/progress.py)."""
    from memfs.mount import display

    names = {"sync": {"pushing": "pushing"}, "unmount": {"pushing": "flushing"}}.get(op)
    if names is None or not display.on_terminal():
        return nullcontext()

    def ask() -> protocol.ProgressAnswer | None:
        try:
            answer = request(info, protocol.Progress(), timeout=5)
        except OSError:
            return None
        return answer if isinstance(answer, protocol.ProgressAnswer) and answer.ok else None

    return display.following(ask, names)


def sync(args: Any) -> int:
    info = registry.find_mount(args.path)
    if info is not None and _names_a_file(args.path, info):
        return _push_file(args, info)
    asked = _ask(args.path, protocol.Sync(full=args.full), args.timeout)
    if isinstance(asked, int):
        return asked
    answers = [answer for _, answer in asked]
    # A pass that ran is not enough: the store must hold what the mount has. A file it
    # refused, or a clean merge it could not hold (kept as a conflict copy that says
    # why), is exit 1 until it is resolved, as at unmount.
    ok = all(answer.ok and not _held_back(answer) for answer in answers)
    if args.json:
        wire = [to_wire(answer) for answer in answers]
        print(json.dumps({"mounts": wire}, indent=2))  # `status --json`'s schema
        return ExitCode.OK if ok else ExitCode.FAILED
    for answer in answers:
        _print_sync(answer)
    return ExitCode.OK if ok else ExitCode.FAILED


def _names_a_file(path: str, info: dict[str, Any]) -> bool:
    """PATH is a file in the mount (or was one: a path below the mount point that is not
    a directory), not the mount point or a directory in it."""
    real = os.path.realpath(path)
    return real != str(info["mountpoint"]) and not os.path.isdir(real)


def _push_file(args: Any, info: dict[str, Any]) -> int:
    """`memfs sync FILE`: push that one file now and wait for the store's answer."""
    rel = os.path.realpath(args.path)[len(str(info["mountpoint"])) :]
    asked = _ask(args.path, protocol.Push(path=rel), args.timeout)
    if isinstance(asked, int):
        return asked
    _, answer = asked[0]
    if args.json:
        print(json.dumps(to_wire(answer), indent=2))
    elif isinstance(answer, ErrorAnswer):
        print(f"memfs: {answer.error}", file=sys.stderr)
    else:
        line = f"{answer.path}: {answer.outcome}"
        if answer.version:
            line += f" version={answer.version}"
        if answer.why:
            line += f" ({answer.why})"
        if answer.copy:
            line += f"; your bytes are kept in {answer.copy}"
        print(line, file=sys.stdout if answer.ok else sys.stderr)
    return ExitCode.OK if answer.ok else ExitCode.FAILED


def _held_back(answer: StatusAnswer | ErrorAnswer) -> bool:
    """The mount holds changes its store refused: refused files, conflict copies of
    a merge the store could not hold, or uploads whose path another memory holds."""
    return isinstance(answer, StatusAnswer) and any(
        s.refused_files
        or any(c.why for c in s.conflict_copies)
        or (s.last_pass is not None and s.last_pass.unsettled)
        for s in answer.stores
    )


def _conflict(c: protocol.ConflictCopy) -> str:
    """`/a.md -> COPY`, and why the two sides were not merged when they were not."""
    return f"{c.path} -> {c.copy}" + (f" ({c.why})" if c.why else "")


def _print_sync(answer: StatusAnswer | ErrorAnswer) -> None:
    if isinstance(answer, ErrorAnswer):
        print(f"memfs: {answer.error}", file=sys.stderr)
        return
    for store in answer.stores:
        r = store.last_pass
        if r is None:  # a sync answer always carries its pass
            print(f"{store.memory_store_id}: no pass")
            continue
        line = (
            f"{store.memory_store_id}: {r.outcome} pulled={r.pulled} "
            f"pushed={r.pushed} deleted={r.deleted} "
            f"conflicts={r.conflicts} in {r.duration_s}s"
        )
        if r.error:
            line += f" error={r.error}"
        print(line)
        found = r.conflict_copies
        # and what keeps the exit 1 from earlier passes: merges the store could not hold
        unheld = [c for c in store.conflict_copies if c.why and c not in found]
        _listing("conflict", [_conflict(c) for c in [*found, *unheld]])
        _listing("refused", [_refusal(f) for f in store.refused_files])
        _listing("unsettled", [f"{p} (another memory holds the path)" for p in r.unsettled])


# A terminal listing names this many files of each kind; `--json` names them all.
SHOWN_PATHS = 20


def _listing(kind: str, items: list[str], indent: str = "  ") -> None:
    """`conflict: /a.md -> copy`, one line a file, then `… and N more`."""
    for item in items[:SHOWN_PATHS]:
        print(f"{indent}{kind}: {item}")
    if len(items) > SHOWN_PATHS:
        more = plural(len(items) - SHOWN_PATHS, f"more {kind} file")
        print(f"{indent}… and {more} (see --json)")


def _epoch(at: str | None) -> float | None:
    """An RFC 3339 time from the daemon as epoch seconds; None if absent or unreadable."""
    if not at:
        return None
    try:
        return datetime.fromisoformat(at).timestamp()
    except ValueError:
        return None


def _clock(at: str | None) -> str:
    epoch = _epoch(at)
    return time.strftime("%H:%M:%S", time.localtime(epoch)) if epoch is not None else "-"


def _next_pass(store: StoreStatus) -> str:
    at = store.next_pass_at
    epoch = _epoch(at)
    if epoch is None:
        return "when the store changes" if store.learns_by == "watch" else "-"
    return f"{_clock(at)} (in {max(0.0, epoch - time.time()):.0f}s)"


def _learning(store: StoreStatus) -> str:
    """How the mount learns of remote changes, and when the store last answered."""
    heard = _epoch(store.last_heard_at)
    ago = (
        "never"
        if heard is None
        else f"{_clock(store.last_heard_at)} " + (f"({max(0.0, time.time() - heard):.0f}s ago)")
    )
    return f"learns of changes by: {store.learns_by}; last heard from the store: {ago}"


def _dead_at(path: str) -> list[dict[str, Any]]:
    """The `status` answers for the dead mount containing `path`, or for the dead
    mounts of a killed session rooted there."""
    from memfs.control.recovery import dead_mount_at, describe_dead

    info = registry.find_dead_mount(path)
    if info is not None:
        return [describe_dead(info, str(info["mountpoint"]))]
    mountpoint = dead_mount_at(path)
    if mountpoint is not None:
        return [describe_dead(None, mountpoint)]
    return [
        describe_dead(i, str(i["mountpoint"])) for i in registry.session_mounts(path, alive=False)
    ]


# A live daemon answers `status` from memory in milliseconds; waiting longer only delays
# the news that it is stopped or wedged.
STATUS_TIMEOUT = 5.0


def _status_of(info: dict[str, Any]) -> StatusAnswer | dict[str, Any]:
    """The daemon's status answer, or a row `{ok: false, mountpoint, pid, error}`
    saying why there is none."""
    pid = int(info.get("pid", 0))

    def failed(why: str) -> dict[str, Any]:
        return {"ok": False, "mountpoint": info.get("mountpoint"), "pid": pid, "error": why}

    if registry.pid_stopped(pid):
        return failed(f"the daemon (pid {pid}) is stopped (SIGSTOP?); resume it: kill -CONT {pid}")
    try:
        answer = request(info, protocol.Status(), timeout=STATUS_TIMEOUT)
    except TimeoutError:
        return failed(f"the daemon (pid {pid}) did not answer within {STATUS_TIMEOUT:g}s")
    except OSError as e:
        return failed(f"the daemon (pid {pid}) is not answering: {e.strerror or e}")
    return failed(answer.error) if isinstance(answer, ErrorAnswer) else answer


def status(args: Any) -> int:
    from memfs.control.recovery import dead_summary, describe_dead

    code: int = ExitCode.OK
    answers: list[StatusAnswer | dict[str, Any]] = []
    if args.path:
        mounts = _live_at(args.path)
        if not mounts:
            dead = _dead_at(args.path)
            if not dead:
                return _fail(f"no live memfs mount at {args.path}")
            print("\n".join(dead_summary(d) for d in dead), file=sys.stderr)
            answers += dead
            code = ExitCode.FAILED
    else:
        registered = registry.registered_mounts()
        mounts = [i for i in registered if i["alive"]]
        answers += [describe_dead(i, str(i["mountpoint"])) for i in registered if not i["alive"]]
    for info in mounts:
        answer = _status_of(info)
        if isinstance(answer, dict):
            print(f"memfs: {answer['mountpoint']}: {answer['error']}", file=sys.stderr)
            code = ExitCode.FAILED
        answers.append(answer)
    if args.json or not sys.stdout.isatty():
        print(json.dumps({"mounts": [to_wire(a) for a in answers]}, indent=2))
        return code
    if not answers:
        print("no live memfs mounts")
    for answer in answers:
        if isinstance(answer, StatusAnswer):
            print(f"{answer.mountpoint} (pid {answer.pid})")
            print(f"  {_pyfuse3_build(answer.pyfuse3)}")
            for s in answer.stores:
                _print_store(s)
            continue
        if answer.get("state") == "dead":
            if not args.path:
                print(f"{answer['mountpoint']} DEAD")
                print(
                    "  " + dead_summary(answer).replace("\nmemfs: ", "\n  ").removeprefix("memfs: ")
                )
            continue
        print(f"{answer.get('mountpoint')} (pid {answer.get('pid')})")
        print(f"  error: {answer.get('error')}")
    return code


def _print_store(s: StoreStatus) -> None:
    """One store of `memfs status` on a terminal."""
    lp = s.last_pass
    print(
        f"  {s.mount_path}  {s.memory_store_id}  {s.access}" + (f"  ({s.name})" if s.name else "")
    )
    print(
        f"    memories={s.memories} bytes={s.bytes} dirty={s.dirty} "
        f"conflicts={s.conflicts} refused={s.refused} "
        f"pending_deletes={s.pending_deletes}"
    )
    last = f"{_clock(lp.at)} {lp.outcome} {lp.duration_s}s" if lp is not None else "-"
    if lp is not None and lp.error:
        last += f" error={lp.error}"
    print(f"    last pass: {last}; next pass: {_next_pass(s)}")
    print(f"    {_learning(s)}")
    if s.offline:
        print(
            "    OFFLINE: the store does not answer; changes are kept in the "
            "journal and pushed once it does"
        )
    _listing("dirty", s.dirty_files, "    ")
    _listing("conflict", [_conflict(c) for c in s.conflict_copies], "    ")
    _listing("refused", [_refusal(r) for r in s.refused_files], "    ")
    _listing("pending delete", [str(p) for p in s.pending_delete_paths], "    ")


def _pyfuse3_build(build: protocol.Pyfuse3Build) -> str:
    """`pyfuse3 3.5.0+memfs.… (patched: …)` or `pyfuse3 3.5.0 (stock: …)`: a slow mount
    on a stock build is told from a slow store at a glance (docs/pyfuse3-patch.md)."""
    if not build.noflush:
        return (
            f"pyfuse3 {build.version} (stock: no noflush, cache_readdir or "
            "zero-message opens; docs/worker.md says how to install the patched build)"
        )
    levers = [
        ("noflush", build.noflush_used),
        ("cache_readdir", build.cache_readdir_used),
        ("zero-message opens", build.zero_message_opens_used),
    ]
    used = [name for name, on in levers if on]
    if build.read_spin_us:
        used.append(f"read spin {build.read_spin_us} us")
    return f"pyfuse3 {build.version} (patched; in use: {', '.join(used) or 'none'})"


def _refusal(r: protocol.RefusedFile) -> str:
    """`/a.md (why; transient, next retry 12:00:15)` or `(why; permanent, …)`."""
    if r.transient:
        return f"{r.path} ({r.why}; transient, next retry {_clock(r.next_retry)})"
    return f"{r.path} ({r.why}; permanent, until its content changes)"


def unmount(args: Any) -> int:
    """One mount, or every mount of a session: all checked for users first, then
    unmounted side by side, each final sync in the one bound."""
    infos = _mounts_for(args.path)
    if not infos:
        return ExitCode.FAILED
    for info in infos:
        refused = _busy(info, lazy=args.lazy, force=args.force, timeout=args.timeout)
        if refused is not None:
            return refused
    if len(infos) == 1:
        return _unmount(str(infos[0]["mountpoint"]), args.timeout)
    with ThreadPoolExecutor(len(infos)) as pool:
        codes = list(pool.map(lambda i: _unmount(str(i["mountpoint"]), args.timeout), infos))
    return max(codes)


def _busy(info: dict[str, Any], *, lazy: bool, force: bool, timeout: float) -> int | None:
    """Refuse (or, with --lazy, detach) a busy mount; None: go on with the unmount.

    `fusermount3 -u` refuses a busy mount with EBUSY, but the daemon's own unmount is
    lazy, so memfs asks /proc itself. A process that starts using the mount between
    this check and the unmount is cut off as with --force.
    """
    from memfs.cli import holders

    mountpoint = str(info["mountpoint"])
    nested = holders.nested_mounts(mountpoint)
    if nested:
        live = {str(i["mountpoint"]): i for i in registry.live_mounts()}
        names = ", ".join(
            f"{mp} ({'memfs, pid ' + str(live[mp]['pid']) if mp in live else kind})"
            for mp, kind in nested
        )
        foreign = [mp for mp, _ in nested if mp not in live]
        if not force or foreign:
            # Only memfs mounts have a final sync memfs can run; others are yours to end.
            hint = (
                "unmount them first"
                if foreign
                else "unmount them first, or use --force to unmount them first"
            )
            return _fail(
                f"{mountpoint} has mounts inside it: {names}; {hint}; nothing was unmounted"
            )
        for mp, _ in nested:  # deepest first, each with its own final sync
            print(f"memfs: unmounting the nested mount {mp} first", file=sys.stderr)
            code = _busy(live[mp], lazy=False, force=True, timeout=timeout)
            if code is None:
                code = _unmount(mp, timeout)
            if code != ExitCode.OK:
                return _fail(
                    f"the nested mount {mp} did not unmount cleanly; {mountpoint} stays mounted"
                )
    pid = int(info.get("pid", 0))
    held = holders.holders(mountpoint, ignore=frozenset({pid}))
    if not held:
        return None
    listing = "".join(f"\nmemfs:   {h}" for h in held[:20])
    if len(held) > 20:
        listing += f"\nmemfs:   … and {len(held) - 20} more"
    if lazy:
        result = subprocess.run(
            ["fusermount3", "-u", "-z", mountpoint], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            return _fail(f"could not detach {mountpoint}: {result.stderr.strip()}")
        print(
            f"memfs: detached {mountpoint}; it is still in use by:{listing}\nmemfs: the "
            f"daemon (pid {pid}) serves them, then runs the final sync and exits when "
            "the last one lets go",
            file=sys.stderr,
        )
        return ExitCode.OK
    if force:
        print(
            f"memfs: --force: after the final sync these lose {mountpoint} (their next "
            f"access fails with ENOTCONN):{listing}",
            file=sys.stderr,
        )
        return None
    return _fail(
        f"{mountpoint} is busy; nothing was unmounted. In use by:{listing}\n"
        "memfs: close those files or leave the directory, or use --lazy (detach "
        "now, final sync when they let go) or --force (final sync, then cut them "
        "off)"
    )


def _unmount(mountpoint: str, timeout: float) -> int:
    asked = _ask(mountpoint, protocol.Unmount(), timeout)
    if isinstance(asked, int):
        return asked
    [(info, answer)] = asked
    pid = int(info.get("pid", 0))
    deadline = time.monotonic() + 15
    while pid and registry.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if isinstance(answer, ErrorAnswer):
        print(f"memfs: {answer.error}", file=sys.stderr)
        return ExitCode.FAILED
    from memfs.mount.display import left_lines

    for line in left_lines(answer):
        print(line, file=sys.stderr)
    return ExitCode.OK if answer.ok else ExitCode.FAILED
