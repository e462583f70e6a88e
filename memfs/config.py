"""Data every layer shares: exit codes, deletion modes, excludes, interval rules.

The exit codes are part of the command-line contract (docs/operations.md lists them):
scripts and service managers branch on them, so a code never changes meaning.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import Literal


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1        # the operation ran and failed
    USAGE = 2         # bad usage or configuration: fix the command line or environment
    UNREACHABLE = 3   # the store or server could not be reached
    INTERRUPTED = 130  # Ctrl-C (SIGINT) or SIGTERM before the command finished


# How a local delete reaches the store (`--deletions`).
DeletionMode = Literal["enabled", "log_only", "disabled"]
# Editor temporaries and other names that are never memories (local-only).
DEFAULT_EXCLUDES = (".*.swp", ".*.swo", ".*.swx", "*~", ".#*", "#*#", "4913", ".nfs*",
                    ".fuse_hidden*")
MIN_INTERVAL = 5.0


def check_interval(value: float) -> float:
    """A sync interval the flags may set: at least MIN_INTERVAL seconds, not NaN."""
    if math.isnan(value) or value < MIN_INTERVAL:
        raise ValueError(f"the sync interval must be at least {MIN_INTERVAL:g} seconds")
    return value
