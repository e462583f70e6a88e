"""The control protocol: what a CLI or worker may ask a mount's daemon, and the framing.

A request is one JSON object on one line, `{"op": OP, ...fields}`; the answer is one
JSON object on one line, always with `ok`. Each op has one request class below (its
fields are the wire fields) and one answer type. `parse_request` turns any bytes into a
typed request or raises `ProtocolError` with a line fit to send back: garbage, wrong
types, unknown ops and over-long lines are answered, never raised into the daemon.
`LineBuffer` is the one framing implementation, used by the server and both clients.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Generic, Literal, TypeVar, get_args, get_origin

from memfs.control.codec import ABSENT, DecodeError, decode

# A request names a path and a few words: 64 KiB is generous. An answer may list every
# dirty file of a big store or carry a conflict copy (base64), hence its larger bound.
MAX_REQUEST = 64 * 1024
MAX_ANSWER = 64 * 1024 * 1024

T = TypeVar("T")
A = TypeVar("A")  # an answer type, in a client's signature
A_co = TypeVar("A_co", covariant=True)


class ProtocolError(ValueError):
    """A line that is not a valid request or answer; the message says why."""


class LineTooLong(ProtocolError):
    pass


class LineBuffer:
    """Newline-delimited framing with a bound: bytes in, at most one complete line out."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buf = bytearray()

    def feed(self, data: bytes) -> bytes | None:
        """The first complete line (without its newline) once it has arrived, else None.
        Raises LineTooLong as soon as more than `limit` bytes came without a newline."""
        end = data.find(b"\n")
        if end >= 0:
            self._buf += data[:end]
        else:
            self._buf += data
        if len(self._buf) > self.limit:
            raise LineTooLong(f"line longer than {self.limit} bytes")
        return bytes(self._buf) if end >= 0 else None

    @property
    def pending(self) -> int:
        """Bytes received so far of a line not yet complete."""
        return len(self._buf)


def encode(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n"


def _object(line: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        raise ProtocolError(f"the {what} is not UTF-8") from None
    except (ValueError, RecursionError):
        raise ProtocolError(f"the {what} is not JSON") from None
    if not isinstance(value, dict):
        raise ProtocolError(f"the {what} must be a JSON object")
    return value


# -- answers ----------------------------------------------------------------------------
#
# Each op's answer is one dataclass below (`Asks[...]` on its request names it); its
# fields are the wire keys, in wire order, and nested objects are dataclasses too.
# memfs/control/codec.py's `to_wire` is the one encoder (the daemon's side, and `--json`
# output), its `decode` the one decoder (the client's side): a field is named once, as an
# attribute. A field made with `metadata=ABSENT` is left off the wire while it is None (a
# key only some answers carry). A field without a default is required: an answer without
# it is an error answer naming it; a field added later gets a default, so a daemon still
# running an older memfs keeps answering.


@dataclass
class ErrorAnswer:
    """Any op's answer when it could not be served; `unreachable`/`missing` refine it."""

    ok: Literal[False]
    error: str
    unreachable: bool | None = field(default=None, metadata=ABSENT)
    missing: bool | None = field(default=None, metadata=ABSENT)


@dataclass
class ConflictCopy:
    """A conflict copy a pass kept; `why`: why a clean merge was not kept (None: a real
    conflict)."""

    path: str
    copy: str
    at: str
    why: str | None


@dataclass
class RefusedFile:
    """A file the store refused; a `transient` refusal is retried at `next_retry`."""

    path: str
    why: str
    transient: bool
    next_retry: str | None


@dataclass
class LastPass:
    """One sync pass as `status` and `sync` show it (times in RFC 3339)."""

    at: str
    duration_s: float
    cpu_ms: float
    outcome: str
    error: str | None
    pulled: int
    pushed: int
    deleted: int
    conflicts: int
    conflict_copies: list[ConflictCopy]
    listed: bool
    kind: str
    unsettled: list[str]


@dataclass
class StoreStatus:
    """One store of a `status` answer: what it is, then its statistics."""

    memory_store_id: str
    name: str
    mount_path: str
    access: str
    interval_s: float
    deletions: str
    memories: int
    bytes: int
    dirty: int
    refused: int
    conflicts: int
    pending_deletes: int
    missing_content: int
    offline: bool
    conflict_copies: list[ConflictCopy]
    refused_files: list[RefusedFile]
    dirty_files: list[str]
    excluded: int
    pending_delete_paths: list[str | None]
    last_pass: LastPass | None  # `sync`: the pass it ran
    next_pass_at: str | None
    learns_by: str
    last_heard_at: str | None
    passes: dict[str, int]
    feed_missed: int


@dataclass(frozen=True)
class Pyfuse3Build:
    """The pyfuse3 build, what it lets memfs ask of the kernel, and what this mount uses."""

    version: str
    noflush: bool  # the build has FileInfo.noflush (`NOFLUSH`)
    cache_readdir: bool  # the build has FileInfo.cache_readdir
    zero_message_opens: bool  # the build has Operations.pass_inode_without_fh
    noflush_used: bool
    cache_readdir_used: bool
    zero_message_opens_used: bool  # open/opendir answer ENOSYS (read-only mounts)
    read_spin: bool  # the build's session loop can read on before it sleeps
    read_spin_us: int  # how long it does (`--read-spin-us`; 0: not at all)


@dataclass
class StatusAnswer:
    """`status` and `sync` (then each store's `last_pass` is the pass just run, and `ok`
    says whether it went well); the FUSE side's statistics follow the stores."""

    ok: bool
    mountpoint: str
    pid: int
    stores: list[StoreStatus]
    fuse_requests: dict[str, int]
    pyfuse3: Pyfuse3Build
    negative_entries: dict[str, Any]
    xattrs: bool
    # Defaults: daemons started before these fields existed (still running after an
    # upgrade) answer without them, and `memfs status` still shows them.
    close_watch: dict[str, Any] | None = None


@dataclass
class PushAnswer:
    """`push`: `outcome` is one of sync/plan.py's `PushOutcome`; `ok` only for pushed
    and unchanged."""

    ok: bool
    outcome: str
    path: str
    version: str | None
    why: str
    copy: str | None


@dataclass
class Flushed:
    outcome: str
    error: str | None
    pushed: int


@dataclass
class FlushAnswer:
    ok: bool
    stores: dict[str, Flushed]  # by store id; none for a read-only store


@dataclass
class RestoreAnswer:
    ok: bool
    restored: dict[str, int]  # files brought back, by store id


@dataclass
class HistoryVersion:
    """One version of a memory (`path`, `content_*` are None once redacted or deleted)."""

    id: str
    memory_id: str
    operation: str
    path: str | None
    created_at: str
    created_by: dict[str, Any]
    actor: str
    content_sha256: str | None
    content_size_bytes: int | None
    redacted_at: str | None


@dataclass
class LocalFile:
    """The mount's file at a history request's path."""

    exists: Literal[True]
    state: str
    sha: str | None
    memory_id: str | None
    base_sha: str | None
    dirty: bool
    conflict: str | None


@dataclass
class NoLocalFile:
    """No file at a history request's path: `pending-delete` (its memory named) or
    `absent`."""

    exists: Literal[False]
    state: str
    memory_id: str | None


@dataclass
class HistoryAnswer:
    """`history`: a memory's versions, newest first; with `what="show"` also the chosen
    `version` and its `content`. `local` is None when no mount was asked."""

    ok: bool
    memory_store_id: str
    path: str
    memory_id: str | None
    access: str
    local: LocalFile | NoLocalFile | None
    versions: list[HistoryVersion]
    version: HistoryVersion | None = field(default=None, metadata=ABSENT)
    content: str | None = field(default=None, metadata=ABSENT)


@dataclass
class KeptCopy:
    """One kept conflict copy (memfs/state/conflicts.py's `Kept`); `local_path`: where
    the mount shows its file (`list` and `get`)."""

    id: str
    memory_store_id: str
    path: str
    at: str
    copy: str
    size: int
    memory_id: str | None
    local_sha256: str | None
    remote_sha256: str | None
    remote_version: str | None
    restored_at: str | None
    local_path: str | None = field(default=None, metadata=ABSENT)


@dataclass
class CopyTarget:
    """The file a conflict copy belongs to, as the mount has it now."""

    exists: Literal[True]
    state: str
    sha: str | None
    dirty: bool


@dataclass
class NoCopyTarget:
    exists: Literal[False]


@dataclass
class ConflictsAnswer:
    """`conflicts`, by `what`: list (`mountpoint`, `conflicts`), get (`conflict`,
    `content_b64`, `local`, `access`), restored (`conflict`), drop (`dropped`)."""

    ok: bool
    mountpoint: str | None = field(default=None, metadata=ABSENT)
    conflicts: list[KeptCopy] | None = field(default=None, metadata=ABSENT)
    conflict: KeptCopy | None = field(default=None, metadata=ABSENT)
    content_b64: str | None = field(default=None, metadata=ABSENT)
    local: CopyTarget | NoCopyTarget | None = field(default=None, metadata=ABSENT)
    access: str | None = field(default=None, metadata=ABSENT)
    dropped: KeptCopy | None = field(default=None, metadata=ABSENT)


@dataclass
class PhaseEnded:
    phase: str
    done: int
    total: int | None


@dataclass
class StoreProgress:
    """One store's phase ("" when idle), done of total; `last`: the phase that ended
    last, while idle."""

    memory_store_id: str
    label: str
    phase: str
    done: int
    total: int | None
    last: PhaseEnded | None = field(default=None, metadata=ABSENT)


@dataclass
class ProgressAnswer:
    ok: bool
    closing: bool
    stores: list[StoreProgress]


@dataclass
class RefusedPath:
    path: str
    why: str


@dataclass
class UnmountAnswer:
    """`unmount`, once the final sync is done: the changed files it could not push and
    the files the store refused (they are only local), by store id."""

    ok: bool
    seconds: float
    unpushed: dict[str, list[str]]
    refused: dict[str, list[RefusedPath]]
    stopped: bool
    outcomes: dict[str, str]


Answer = (
    StatusAnswer
    | PushAnswer
    | FlushAnswer
    | RestoreAnswer
    | HistoryAnswer
    | ConflictsAnswer
    | ProgressAnswer
    | UnmountAnswer
    | ErrorAnswer
)


def error(message: str) -> ErrorAnswer:
    return ErrorAnswer(ok=False, error=message)


def parse_answer(line: bytes, kind: type[T], op: str = "") -> T | ErrorAnswer:
    """The typed answer of one line; a broken one, or one that does not fit `kind`,
    becomes an error answer that says why."""
    try:
        raw = _object(line, "answer")
    except ProtocolError as e:
        return error(f"the daemon sent a broken answer: {e}")
    ok = raw.get("ok")
    if not isinstance(ok, bool):
        return error("the daemon sent an answer without ok")
    name = f"{op} answer" if op else "answer"
    try:
        if ok is False and "error" in raw:
            return decode(ErrorAnswer, raw, name)
        return decode(kind, raw, name)
    except DecodeError as e:
        return error(f"the daemon's {e} (a daemon of another memfs version?)")


# -- requests ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Asks(Generic[A_co]):
    """A request whose answer is an `A` (or an `ErrorAnswer`); `answer` is that class,
    read off the subclass's base, so each request names its answer once."""

    op: ClassVar[str]
    answer: ClassVar[type[Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            if get_origin(base) is Asks:
                (cls.answer,) = get_args(base)


@dataclass(frozen=True)
class Status(Asks[StatusAnswer]):
    """The mount and each store's statistics (`memfs status`)."""

    op: ClassVar[str] = "status"


@dataclass(frozen=True)
class Sync(Asks[StatusAnswer]):
    """One pass of every store now; answered with `status`'s schema plus `last_pass`.
    `full`: a full listing (reconciliation) instead of the change feed."""

    op: ClassVar[str] = "sync"
    full: bool = False


@dataclass(frozen=True)
class Flush(Asks[FlushAnswer]):
    """Push what is dirty now (the SDK worker adapter's mid-session flush)."""

    op: ClassVar[str] = "flush"


@dataclass(frozen=True)
class Push(Asks[PushAnswer]):
    """Push one file now and answer once the store has it, refused it or could not be
    asked (`memfs sync FILE`, the SDK worker's `write_file`). `path` is relative to the
    mount point. `merge=False`: a change another session made first wins (the file
    becomes the store's version, the local bytes a conflict copy) instead of a three-way
    merge. `sha`: the content the caller wrote; another content there is `changed`."""

    op: ClassVar[str] = "push"
    path: str = ""
    merge: bool = True
    sha: str | None = None


@dataclass(frozen=True)
class Restore(Asks[RestoreAnswer]):
    """Bring back files deleted locally but still in the store (the worker adapter)."""

    op: ClassVar[str] = "restore"
    sync: bool = True


@dataclass(frozen=True)
class History(Asks[HistoryAnswer]):
    """A file's versions (`log`), or one version's content (`show`)."""

    op: ClassVar[str] = "history"
    what: Literal["log", "show"] = "log"
    path: str = ""
    version: str | None = None


@dataclass(frozen=True)
class Conflicts(Asks[ConflictsAnswer]):
    """The kept conflict copies (`list`), or one of them by id prefix."""

    op: ClassVar[str] = "conflicts"
    what: Literal["list", "get", "restored", "drop"] = "list"
    id: str = ""


@dataclass(frozen=True)
class Progress(Asks[ProgressAnswer]):
    """Each store's current phase, done and total (drawn while `sync`/`unmount` wait)."""

    op: ClassVar[str] = "progress"


@dataclass(frozen=True)
class Unmount(Asks[UnmountAnswer]):
    """Stop: the final sync, then the unmount; answered when the flush is done."""

    op: ClassVar[str] = "unmount"


Request = Status | Sync | Push | Flush | Restore | History | Conflicts | Progress | Unmount
REQUESTS: dict[str, type[Request]] = {
    cls.op: cls
    for cls in (Status, Sync, Push, Flush, Restore, History, Conflicts, Progress, Unmount)
}
_CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("history", "what"): ("log", "show"),
    ("conflicts", "what"): ("list", "get", "restored", "drop"),
}


def _field_ok(value: Any, kind: str) -> bool:
    """Whether a JSON value fits a request field's annotation (the few kinds used)."""
    if value is None:
        return "None" in kind
    if kind == "bool":
        return isinstance(value, bool)
    return isinstance(value, str)


def parse_request(line: bytes) -> Request:
    """The typed request of one line (without its newline), or ProtocolError."""
    raw = _object(line, "request")
    op = raw.pop("op", None)
    cls = REQUESTS.get(op) if isinstance(op, str) else None
    if cls is None:
        shown = op if isinstance(op, str) else type(op).__name__
        raise ProtocolError(f"unknown op {shown[:40]!r}; known: {', '.join(REQUESTS)}")
    known = {f.name: str(f.type) for f in fields(cls)}
    for name, value in raw.items():
        kind = known.get(name)
        if kind is None:
            raise ProtocolError(f"{op}: unknown field {name[:40]!r}")
        if not _field_ok(value, kind):
            raise ProtocolError(f"{op}: field {name!r} has the wrong type")
        choices = _CHOICES.get((op, name))
        if choices is not None and value not in choices:
            raise ProtocolError(f"{op}: {name} must be one of {', '.join(choices)}")
    return cls(**raw)


def encode_request(request: Asks[Any]) -> bytes:
    return encode({"op": request.op, **asdict(request)})
