"""The units in contrib/systemd parse (`systemd-analyze verify`, man pages included) and
are the ones the docs show."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.units import BIN, UNITS, example, parse_unit, values

REPO = Path(__file__).resolve().parents[2]


def _need_systemd_analyze() -> None:
    if shutil.which("systemd-analyze") is not None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail("systemd-analyze is required under CI=true")
    pytest.skip("systemd-analyze is not installed")


def test_docs_show_the_shipped_units() -> None:
    for name in ("memfs@.service", "memfs-session.service"):
        assert example(name) == (UNITS / name).read_text(), name
    worker = example("systemd", REPO / "docs" / "worker.md")
    assert worker == (UNITS / "memfs-worker.service").read_text()


@pytest.mark.parametrize(
    "name", ["memfs@.service", "memfs-session.service", "memfs-worker.service"]
)
def test_unit_verifies(name: str, tmp_path: Path) -> None:
    """Every key known, every command executable (this checkout's, in place of
    /usr/local/bin), and every `Documentation=man:` page found: the generated ones."""
    _need_systemd_analyze()
    man = tmp_path / "man"
    for page, section in (("memfs", 1), ("mount.fuse.memfs", 8)):
        (man / f"man{section}").mkdir(parents=True, exist_ok=True)
        text = subprocess.run(
            [sys.executable, "-m", "memfs.cli", "--print-manpage", page],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        (man / f"man{section}" / f"{page}.{section}").write_text(text)
    text = (UNITS / name).read_text().replace("/usr/local/bin/", f"{BIN}/")
    unit_name = name.replace("@.", "@mnt-prefs.")  # a template verifies as an instance
    (tmp_path / name).write_text(text)
    if unit_name != name:
        (tmp_path / unit_name).symlink_to(tmp_path / name)
    done = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / unit_name)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MANPATH": str(man)},
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    unit = parse_unit(text)
    assert values(unit, "Service", "KillSignal") == ["SIGTERM"]
    assert float(values(unit, "Service", "TimeoutStopSec")[0]) >= 45  # the flush + 15 s


def test_the_link_line_links_this_checkout(tmp_path: Path) -> None:
    """The docs' `ln` line, from the checkout, into a stand-in for /usr/local/bin."""
    line = example("link commands").strip()
    assert line.startswith("sudo ln ") and line.endswith(" /usr/local/bin/")
    line = line.removeprefix("sudo ").replace("/usr/local/bin/", f"{tmp_path}/")
    done = subprocess.run(
        ["bash", "-c", line], cwd=BIN.parent.parent, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    for name in ("memfs", "memfs-worker"):
        assert (tmp_path / name).resolve() == (BIN / name).resolve()
        assert (
            subprocess.run(
                [str(tmp_path / name), "--help"], capture_output=True, timeout=60
            ).returncode
            == 0
        )
