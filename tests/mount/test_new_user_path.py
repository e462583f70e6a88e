"""The new user's robustness path (issue 12), scripted end to end with shell tools:
`scripts/try-robustness` must pass every check."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.deadline(300)


def test_the_new_user_robustness_script_passes() -> None:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "MEMFS": str(bin_dir / "memfs"), "PYTHON": sys.executable}
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "try-robustness")],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all checks passed" in result.stdout
    assert "FAIL" not in result.stdout and "Traceback" not in result.stdout + result.stderr
