"""Assertions that a system call or a shell tool is refused, and with what."""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Callable
from typing import Any

import pytest


def refused(code: int, fn: Callable[..., Any], *args: Any) -> None:
    """`fn(*args)` must fail with exactly errno `code`."""
    with pytest.raises(OSError) as info:
        fn(*args)
    assert info.value.errno == code, (
        f"{fn.__name__}{args}: expected {errno.errorcode[code]}, got "
        f"{errno.errorcode.get(info.value.errno or 0)}"
    )


def tool_fails(*cmd: str, message: str) -> subprocess.CompletedProcess[str]:
    """A shell tool must exit non-zero and say `message` on stderr."""
    result = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)
    assert result.returncode != 0, cmd
    assert message in result.stderr, result.stderr
    return result
