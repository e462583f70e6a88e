"""`memfs store import/export`: a bar with totals on a terminal, clean JSON on a pipe."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.api import Api
from tests.support.server import REPO_ROOT, ServerProcess
from tests.support.tty import run_in_pty

FILES = 30


def env_for(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    return {**env, "ANTHROPIC_BASE_URL": url, "TERM": "xterm"}


def tree(root: Path) -> Path:
    for i in range(FILES):
        (root / "notes" / f"{i % 3}").mkdir(parents=True, exist_ok=True)
        (root / "notes" / f"{i % 3}" / f"n{i}.md").write_text(f"note {i}\n")
    return root


def test_import_and_export_show_totals_on_a_terminal(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    sid = shared_api.create_store("progress")["id"]
    env = env_for(shared_server.url)
    code, shown = run_in_pty(["store", "import", sid, str(tree(tmp_path / "src"))], env)
    assert code == 0, shown
    assert re.search(rf"importing {FILES} of {FILES} files \[#+\]", shown), shown
    assert f"{sid}: {FILES} created" in shown

    code, shown = run_in_pty(["store", "export", sid, str(tmp_path / "dst")], env)
    assert code == 0, shown
    assert re.search(rf"exporting {FILES} of {FILES} memories \[#+\]", shown), shown
    assert f"exported {FILES} memories" in shown


def test_import_and_export_on_a_pipe_stay_clean_json(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    sid = shared_api.create_store("quiet")["id"]
    env = env_for(shared_server.url)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memfs.cli", "store", *args, "--json"],
            env=env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )

    imported = run("import", sid, str(tree(tmp_path / "src")))
    assert imported.returncode == 0
    assert json.loads(imported.stdout)["created"] == FILES
    assert imported.stderr == ""
    exported = run("export", sid, str(tmp_path / "dst"))
    assert exported.returncode == 0
    assert json.loads(exported.stdout)["written"] == FILES
    assert exported.stderr == ""
