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
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Literal, NotRequired, TypedDict

# A request names a path and a few words: 64 KiB is generous. An answer may list every
# dirty file of a big store or carry a conflict copy (base64), hence its larger bound.
MAX_REQUEST = 64 * 1024
MAX_ANSWER = 64 * 1024 * 1024


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


# -- requests ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Status:
    """The mount and each store's statistics (`memfs status`)."""

    op: ClassVar[str] = "status"


@dataclass(frozen=True)
class Sync:
    """One pass of every store now; answered with `status`'s schema plus `last_pass`.
    `full`: a full listing (reconciliation) instead of the change feed."""

    op: ClassVar[str] = "sync"
    full: bool = False


@dataclass(frozen=True)
class Flush:
    """Push what is dirty now (the SDK worker adapter's mid-session flush)."""

    op: ClassVar[str] = "flush"


@dataclass(frozen=True)
class Push:
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
class Restore:
    """Bring back files deleted locally but still in the store (the worker adapter)."""

    op: ClassVar[str] = "restore"
    sync: bool = True


@dataclass(frozen=True)
class History:
    """A file's versions (`log`), or one version's content (`show`)."""

    op: ClassVar[str] = "history"
    what: Literal["log", "show"] = "log"
    path: str = ""
    version: str | None = None


@dataclass(frozen=True)
class Conflicts:
    """The kept conflict copies (`list`), or one of them by id prefix."""

    op: ClassVar[str] = "conflicts"
    what: Literal["list", "get", "restored", "drop"] = "list"
    id: str = ""


@dataclass(frozen=True)
class Progress:
    """Each store's current phase, done and total (drawn while `sync`/`unmount` wait)."""

    op: ClassVar[str] = "progress"


@dataclass(frozen=True)
class Unmount:
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


def encode_request(request: Request) -> bytes:
    return encode({"op": request.op, **asdict(request)})


# -- answers ----------------------------------------------------------------------------


class ErrorAnswer(TypedDict):
    """Any op's answer when it could not be served; `unreachable`/`missing` refine it."""

    ok: Literal[False]
    error: str
    unreachable: NotRequired[bool]
    missing: NotRequired[bool]


class StatusAnswer(TypedDict):
    """`status` and `sync` (each store then carries `last_pass`)."""

    ok: bool
    mountpoint: str
    pid: int
    stores: list[dict[str, Any]]


class PushAnswer(TypedDict):
    """`push`: `outcome` is one of `PUSH_OUTCOMES`; `ok` only for pushed and unchanged."""

    ok: bool
    outcome: str
    path: str
    version: str | None
    why: str
    copy: str | None


class FlushAnswer(TypedDict):
    ok: bool
    stores: dict[str, dict[str, Any]]


class RestoreAnswer(TypedDict):
    ok: bool
    restored: dict[str, int]


class ProgressAnswer(TypedDict):
    ok: bool
    closing: bool
    stores: list[dict[str, Any]]


class UnmountAnswer(TypedDict):
    ok: bool
    seconds: float
    unpushed: dict[str, list[str]]
    # per store, the files the store refused: {"path", "why"}; they are only local
    refused: dict[str, list[dict[str, str]]]
    stopped: bool
    outcomes: dict[str, str]


# history and conflicts answers vary by `what`; memfs/mount/answers.py documents them.
Answer = Mapping[str, Any]


def error(message: str) -> ErrorAnswer:
    return {"ok": False, "error": message}


def parse_answer(line: bytes) -> dict[str, Any]:
    """The answer object of one line; a broken one becomes an error answer."""
    try:
        answer = _object(line, "answer")
    except ProtocolError as e:
        return dict(error(f"the daemon sent a broken answer: {e}"))
    if not isinstance(answer.get("ok"), bool):
        return dict(error("the daemon sent an answer without ok"))
    return answer
