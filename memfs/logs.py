"""Logging set-up: one `key=value` line per event, on stderr or a file."""

from __future__ import annotations

import logging
import sys


def configure(level: str = "info", log_file: str | None = None) -> None:
    handler: logging.Handler
    if log_file:
        handler = logging.FileHandler(log_file)
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "hpack", "hypercorn.access"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
