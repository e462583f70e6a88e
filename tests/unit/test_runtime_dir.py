"""Another user pre-creating the runtime directory cannot deny memfs to a user (issue 24,
item 6): the registry falls back to ~/.local/state/memfs/run, checked the same way."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.control import registry
from memfs.errors import ConfigError

VICTIM = 54321  # a uid no test runs as: /tmp/memfs-54321 is this test's alone


@pytest.fixture
def victim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process seen as uid VICTIM, with a home of its own; yields /tmp/memfs-VICTIM."""
    if os.geteuid() != 0:
        pytest.skip("planting a directory as another user needs root")
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, VICTIM, VICTIM)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(registry.os, "getuid", lambda: VICTIM)
    monkeypatch.setattr(registry, "_warned", set())
    planted = Path(f"/tmp/memfs-{VICTIM}")
    _remove(planted)
    try:
        yield planted
    finally:
        _remove(planted)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _own_fallback(home: Path) -> Path:
    run = home / ".local" / "state" / "memfs" / "run"
    run.mkdir(parents=True, mode=0o700)
    for p in (run, *run.parents):
        if p == home.parent:
            break
        os.chown(p, VICTIM, VICTIM)
    return run


def test_a_planted_tmp_directory_falls_back_with_one_warning(
    victim: Path, caplog: pytest.LogCaptureFixture
) -> None:
    victim.mkdir(mode=0o777)  # root (another user, for the victim) was there first
    run = _own_fallback(Path(os.environ["HOME"]))
    assert registry.runtime_dir() == run
    assert registry.runtime_dir() == run
    assert registry.registered_mounts() == []
    warned = [r.getMessage() for r in caplog.records if "not private" in r.getMessage()]
    assert len(warned) == 1, warned
    assert f"path=/tmp/memfs-{VICTIM}" in warned[0] and "belongs to uid 0" in warned[0]


@pytest.mark.parametrize("plant", ["symlink", "file", "open mode"])
def test_every_kind_of_plant_is_refused(victim: Path, plant: str) -> None:
    run = _own_fallback(Path(os.environ["HOME"]))
    if plant == "symlink":
        victim.symlink_to(run)  # even to the victim's own directory: not followed
    elif plant == "file":
        victim.write_text("")
    else:
        victim.mkdir(mode=0o777)
        os.chown(victim, VICTIM, VICTIM)
        victim.chmod(0o777)
    assert registry.runtime_dir() == run


def test_both_planted_is_one_clear_error(victim: Path) -> None:
    victim.mkdir()
    with pytest.raises(ConfigError, match=r"not a private directory of this user \(it belongs"):
        registry.runtime_dir()  # the fallback under HOME is root's (unchowned) too
