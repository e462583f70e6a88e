"""Logging set-up: one line per event, `text` (`message key=value…`) or `json`.

memfs's log calls keep one form: a constant message, then `key=%s` fields
(`log.warning("memory sync failed memory_store_id=%s error=%s", store_id, e)`). The
formatters rely on it: `text` quotes a value that holds spaces, quotes, `=` or control
characters (JSON string syntax) and leaves out a field whose value is None, so every
line splits back into its fields; `json` gives each field its own key. A record of
another shape (a library's) keeps its message as it is.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import logging
import logging.handlers
import os
import re
import signal
import sys
import time
from collections.abc import Hashable
from typing import Any

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# `key=%s` (any printf conversion) in a format string; `%%` is a literal percent.
_FIELD = re.compile(r"(?P<key>[A-Za-z_][\w.]*)=%(?P<spec>[-#0 +]*\d*(?:\.\d+)?[sdirfgex])")
_PLACEHOLDER = re.compile(r"%(?:%|[-#0 +]*\d*(?:\.\d+)?[sdirfgexc])")

_format = "text"


def quote(value: str) -> str:
    """`value` as it may stand after `key=`: bare if it is one plain token."""
    if value and not any(c.isspace() or c in '"=\\' or not c.isprintable() for c in value):
        return value
    return _json(value)


def _json(value: Any) -> str:
    """JSON text as UTF-8 allows: a lone surrogate a server sent is escaped, where it
    made the log file's write fail."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, default=str)
    return text


def split(record: logging.LogRecord) -> tuple[str, list[tuple[str, Any]]] | None:
    """The record's constant message and its `(key, value)` fields, in order; None if
    the record does not have memfs's form (every placeholder a `key=` field)."""
    msg, args = record.msg, record.args
    if not isinstance(msg, str):
        return None
    if not args:
        args = ()
    if not isinstance(args, tuple):
        return None
    fields = list(_FIELD.finditer(msg))
    placeholders = [p for p in _PLACEHOLDER.finditer(msg) if p.group() != "%%"]
    if len(fields) != len(placeholders) or len(fields) != len(args):
        return None
    if fields and msg[fields[-1].end() :].strip():
        return None  # text after the fields: not memfs's form
    head = msg[: fields[0].start()] if fields else msg
    pairs: list[tuple[str, Any]] = []
    # Literal pairs in the head (`fault=error status=%d`) are fields too.
    literal = re.search(r"(?:^|\s)[A-Za-z_][\w.]*=\S+(?:\s+[A-Za-z_][\w.]*=\S+)*\s*$", head)
    if literal:
        for token in head[literal.start() :].split():
            key, _, text = token.partition("=")
            pairs.append((key, text))
        head = head[: literal.start()]
    value: Any
    for match, value in zip(fields, args, strict=True):
        spec = match.group("spec")
        if value is not None and spec[-1] not in "sr":
            value = ("%" + spec) % value  # %d, %.1f …: numbers as the call meant them
            try:
                value = json.loads(value)
            except ValueError:
                pass
        elif value is not None and not isinstance(value, bool | int | float):
            value = repr(value) if spec[-1] == "r" else str(value)
        pairs.append((match.group("key"), value))
    return head.strip().replace("%%", "%"), pairs


class TextFormatter(logging.Formatter):
    """`DATE TIME LEVEL logger: message key=value…`, values quoted when needed."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        parts = split(record)
        if parts is not None:
            head, pairs = parts
            record.message = " ".join(
                [head] + [f"{k}={quote(str(v))}" for k, v in pairs if v is not None]
            ).strip()
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (RFC 3339), level, logger, message, then fields."""

    def format(self, record: logging.LogRecord) -> str:
        parts = split(record)
        pairs: list[tuple[str, Any]] = []
        if parts is None:
            head = record.getMessage()
        else:
            head, pairs = parts
        out: dict[str, Any] = {
            "time": rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": head,
        }
        for key, value in pairs:
            if value is not None:
                out.setdefault(key, value)
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        return _json(out)


def plural(count: int, one: str, many: str | None = None) -> str:
    """`1 file`, `2 files`: never `file(s)` (every command's human lines use it)."""
    return f"{count} {one if count == 1 else (many or one + 's')}"


def rfc3339(epoch: float) -> str:
    """UTC, millisecond precision: `2026-01-01T14:02:11.042Z`."""
    seconds = int(epoch)
    millis = int((epoch - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


# A log file rotates at this size and keeps this many old files: a server that makes
# the daemon warn without end fills at most (1 + LOG_KEEP) * LOG_MAX_BYTES of disk.
LOG_MAX_BYTES = 10 * 1024 * 1024
LOG_KEEP = 3


class LogFile(logging.handlers.RotatingFileHandler):
    """A rotating log file; `private` (the daemon's `memfs.log` in the cache directory)
    is opened 0600 and never through a symlink someone planted there."""

    def __init__(self, path: str, *, private: bool = False, max_bytes: int = LOG_MAX_BYTES):
        self.private = private
        super().__init__(path, maxBytes=max_bytes, backupCount=LOG_KEEP, encoding="utf-8")

    def _open(self) -> Any:
        if not self.private:
            return super()._open()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        return open(os.open(self.baseFilename, flags, 0o600), "a", encoding="utf-8")


# The loggers of httpx and of the anthropic SDK's own copy of it (`httpx2`).
HTTP_REQUEST_LOGGERS = ("httpx", "httpx2")


def _demote_to_debug(record: logging.LogRecord) -> bool:
    """A library's INFO line as DEBUG (the `httpx` logger's requests)."""
    if record.levelno == logging.INFO:
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    return True


def configure(
    level: str = "info",
    log_file: str | None = None,
    log_format: str | None = None,
    *,
    private: bool = False,
    http_requests: bool = False,
) -> None:
    """(Re)point the root logger; `log_format` None keeps the one set before (the
    `--daemon` child re-opens its log file, and keeps `--log-format`); `http_requests`:
    show each HTTP request at debug."""
    global _format
    if log_format is not None:
        if log_format not in FORMATS:
            raise ValueError(f"unknown log format {log_format!r}")
        _format = log_format
    handler: logging.Handler
    if log_file:
        handler = LogFile(log_file, private=private)
    else:
        handler = logging.StreamHandler(sys.stderr)
    # `kill -USR1 PID`: every thread's stack, where the logs go (a hung daemon's story);
    # a stream without a file descriptor (a caller's StringIO) gets none.
    with contextlib.suppress(ValueError, io.UnsupportedOperation):
        faulthandler.register(signal.SIGUSR1, file=handler.stream or sys.stderr, all_threads=True)
    handler.setFormatter(JsonFormatter() if _format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpcore", "hpack", "hypercorn.access", *HTTP_REQUEST_LOGGERS):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    # httpx logs every request at INFO (one line a second from an idle worker). memfs's
    # own commands never show them (metrics count requests); `http_requests` (the
    # worker, whose SDK's requests are its story) shows them at debug, as DEBUG.
    for name in HTTP_REQUEST_LOGGERS:
        requests = logging.getLogger(name)
        if http_requests and root.level <= logging.DEBUG:
            requests.setLevel(logging.DEBUG)
        if _demote_to_debug not in requests.filters:
            requests.addFilter(_demote_to_debug)
    # hypercorn's "Running on …" would duplicate memfs serve's own `serving …` line.
    logging.getLogger("hypercorn.error").setLevel(max(logging.WARNING, root.level))


class Repeated:
    """A warning that can recur every pass (a server listing the same bad path again
    and again), logged once per cause: a hostile server that repeats or varies it
    grows the log by at most `lines` lines and a count line at 10, 100, 1000 … repeats.

    `cause` is what makes two warnings the same (the store and the path); at most
    `remember` causes are kept, beyond that every warning only counts.
    """

    def __init__(
        self, logger: logging.Logger, message: str, *, lines: int = 100, remember: int = 10_000
    ) -> None:
        self.logger = logger
        self.message = message
        self.lines = lines
        self.remember = remember
        self._seen: set[Hashable] = set()
        self._logged = 0
        self.silenced = 0  # warnings counted instead of logged

    def warning(self, cause: Hashable, *args: object) -> None:
        if cause not in self._seen and len(self._seen) < self.remember:
            self._seen.add(cause)
            if self._logged < self.lines:
                self._logged += 1
                self.logger.warning(self.message, *args)
                return
        self.silenced += 1
        if _power_of_ten(self.silenced):
            self.logger.warning(
                "a warning repeated; it is logged once per cause count=%d warning=%s",
                self.silenced,
                split_head(self.message),
            )

    def forget(self, cause: Hashable) -> None:
        """The cause went away: log it again should it come back."""
        self._seen.discard(cause)


def split_head(message: str) -> str:
    """A log call's constant message without its `key=%s` fields."""
    fields = _FIELD.search(message)
    head = message[: fields.start()] if fields else message
    return head.strip()


def _power_of_ten(n: int) -> bool:
    """10, 100, 1000 …: when a count of repeats is worth a line."""
    if n < 10:
        return False
    while n % 10 == 0:
        n //= 10
    return n == 1
