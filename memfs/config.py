"""Data every layer shares: the CLI's exit codes (one table, used everywhere).

The exit codes are part of the command-line contract (docs/operations.md lists them):
scripts and service managers branch on them, so a code never changes meaning.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1        # the operation ran and failed
    USAGE = 2         # bad usage or configuration: fix the command line or environment
    UNREACHABLE = 3   # the store or server could not be reached
    INTERRUPTED = 130  # Ctrl-C (SIGINT) or SIGTERM before the command finished
