"""What the harness makes the engines do: deterministic trees, the agent's shell script,
the per-operation loop and the flush writes. Pure of any engine: each takes a root."""

from __future__ import annotations

import os
import random
import shlex
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.files import MARKER

from .common import counts_since

WORDS = (
    "alpha beta gamma delta epsilon zeta theta lambda sigma omega note idea todo "
    "fix build deploy cache mount store memory agent review design plan test "
    "python trio fuse kernel inode journal sync push pull merge conflict"
).split()

AGENT_COMMANDS = 300  # the full script; --quick runs a prefix of the same sequence
AGENT_SEED = 7


def content_for(rng: random.Random, size: int, tag: str) -> str:
    out: list[str] = [f"# {tag}\n"]
    n = len(out[0])
    while n < size:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) + "\n"
        out.append(line)
        n += len(line)
    text = "".join(out)[:size]
    return text if text.endswith("\n") else text[:-1] + "\n"


def tree_items(n: int, seed: int, avg: int = 2048) -> list[tuple[str, str]]:
    """`n` memories of `avg` bytes on average, 100 per directory (paths like the API's)."""
    rng = random.Random(seed)
    per_dir = 100 if n >= 100 else n
    items = []
    for i in range(n):
        size = rng.randint(avg // 2, avg * 3 // 2)
        path = f"/d{i // per_dir:03d}/note{i % per_dir:03d}.md"
        items.append((path, content_for(rng, size, path)))
    return items


def agent_tree_items(seed: int) -> list[tuple[str, str]]:
    """The agent workload's 1,000-file tree: 20 topics x 50 notes, 2 KiB on average."""
    rng = random.Random(seed)
    items = []
    for t in range(20):
        for k in range(50):
            path = f"/topic{t:02d}/note{k:02d}.md"
            items.append((path, content_for(rng, rng.randint(1024, 3072), path)))
    return items


def write_tree(root: Path, items: list[tuple[str, str]]) -> None:
    for path, text in items:
        p = root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def agent_script(items: list[tuple[str, str]], commands: int) -> str:
    """The first `commands` of the fixed 300-command agent script (seed 7) over `items`."""
    rng = random.Random(AGENT_SEED)
    live = sorted(p.lstrip("/") for p, _ in items)
    dirs = sorted({p.split("/")[0] for p in live})
    kinds = (
        ["cat"] * 55
        + ["grep"] * 32
        + ["grep_all"] * 8
        + ["sed"] * 30
        + ["append"] * 40
        + ["ls"] * 25
        + ["find"] * 15
        + ["mv"] * 15
        + ["rm"] * 15
        + ["heredoc"] * 40
        + ["python"] * 10
        + ["head_wc"] * 15
    )
    assert len(kinds) == AGENT_COMMANDS
    rng.shuffle(kinds)
    q = shlex.quote
    lines: list[str] = []
    for i, kind in enumerate(kinds):
        f = rng.choice(live)
        d = rng.choice(dirs)
        w = rng.choice(WORDS)
        fail = "|| echo FAIL >&2"
        if kind == "cat":
            lines.append(f"cat {q(f)} > /dev/null {fail}")
        elif kind == "grep":
            lines.append(f"grep -rn {q(w)} {q(d)} > /dev/null; [ $? -le 1 ] {fail}")
        elif kind == "grep_all":
            lines.append(
                f"grep -rn {q(w + ' ' + rng.choice(WORDS))} . > /dev/null; [ $? -le 1 ] {fail}"
            )
        elif kind == "sed":
            lines.append(f"sed -i 's/{w}/{w.upper()}/g' {q(f)} {fail}")
        elif kind == "append":
            lines.append(f"echo {q(f'- step {i}: ' + w)} >> {q(f)} {fail}")
        elif kind == "ls":
            lines.append(f"ls -la {q(d)} > /dev/null {fail}")
        elif kind == "find":
            lines.append(f"find {q(d)} -name 'note1*' > /dev/null {fail}")
        elif kind == "mv":
            new = f"{d}/moved{i:03d}.md"
            lines.append(f"mv {q(f)} {q(new)} {fail}")
            live.remove(f)
            live.append(new)
            live.sort()
        elif kind == "rm":
            lines.append(f"rm {q(f)} {fail}")
            live.remove(f)
        elif kind == "heredoc":
            new = f"{d}/new{i:03d}.md"
            body = content_for(rng, rng.randint(200, 1500), new)
            lines.append(f"cat > {q(new)} <<'EOF' {fail}\n{body}EOF")
            if new not in live:
                live.append(new)
                live.sort()
        elif kind == "python":
            code = (
                f"import pathlib; p = pathlib.Path({f!r}); "
                f"p.write_text(p.read_text().replace({w!r}, {w.title()!r}))"
            )
            lines.append(f"python3 -c {q(code)} {fail}")
        else:
            lines.append(f"head -n 5 {q(f)} | wc -l > /dev/null {fail}")
    head = [
        f"#!/bin/bash\n# memfs bench: agent workload ({commands} of the "
        f"{AGENT_COMMANDS} commands, seed {AGENT_SEED})"
    ]
    return "\n".join(head + lines[:commands]) + "\n"


# ------------------------------------------------------------------ per-operation
PEROP_DATA = (b"x" * 1023) + b"\n"


def create_write_close(p: str) -> None:
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, PEROP_DATA)
    os.close(fd)


def _read(p: str) -> None:
    with open(p, "rb") as f:
        f.read()


def append_line(p: str) -> None:
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"appended line\n")
    os.close(fd)


def save_tmp_rename(p: str) -> None:
    """An editor's save: write `.NAME.tmp`, rename it over NAME (no fsync)."""
    d, b = os.path.split(p)
    tmp = os.path.join(d, f".{b}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, PEROP_DATA)
    os.close(fd)
    os.rename(tmp, p)


Counts = Callable[[], dict[str, int]]


def perop(
    root: Path, n: int, remount: Callable[[], None], counts: Counts | None = None
) -> tuple[dict[str, float], dict[str, dict[str, int]]]:
    """The per-operation sequence on `n` files of 1 KiB in `root`: ops/s of each step
    (listdir in ms), and, when `counts` reads the daemon's FUSE requests by handler,
    each step's requests (totals over the step). `remount` runs between the creates and
    the cold stats."""
    names = [str(root / f"f{i:05d}.txt") for i in range(n)]
    res: dict[str, float] = {}
    reqs: dict[str, dict[str, int]] = {}

    def timed(op: str, fn: Callable[[str], object]) -> None:
        before = counts() if counts else {}
        t0 = time.perf_counter()
        for p in names:
            fn(p)
        res[op] = len(names) / (time.perf_counter() - t0)
        if counts:
            reqs[op] = counts_since(before, counts())

    timed("create_write_close", create_write_close)
    remount()
    timed("stat_cold", os.stat)
    timed("stat_warm", os.stat)
    timed("read_cold", _read)
    timed("read_warm", _read)
    os.listdir(root)
    samples = []
    before = counts() if counts else {}
    for _ in range(5):
        t0 = time.perf_counter()
        entries = os.listdir(root)
        samples.append((time.perf_counter() - t0) * 1000)
    if counts:
        reqs["listdir_warm_ms"] = counts_since(before, counts())
    assert len([e for e in entries if e != MARKER]) == n, len(entries)
    res["listdir_warm_ms"] = statistics.median(samples)
    timed("append", append_line)
    timed("save_tmp_rename", save_tmp_rename)
    timed("unlink", os.unlink)
    return res, reqs


# ------------------------------------------------------------------ one command at a time
# Single shell commands of the agent workload's kinds, each run in its own `bash -c` with
# the agent tree as cwd: the FUSE requests one command costs (and its time) show where
# round trips go. `{n}` is the run number, so commands that move or create stay valid.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("cat", "cat topic00/note00.md > /dev/null"),
    ("head_wc", "head -n 5 topic00/note01.md | wc -l > /dev/null"),
    ("stat", "stat topic00/note02.md > /dev/null"),
    ("stat_missing", "stat topic00/nope.md 2> /dev/null; true"),
    ("ls_la", "ls -la topic01 > /dev/null"),
    ("ls_R", "ls -R . > /dev/null"),
    ("grep_dir", "grep -rn alpha topic02 > /dev/null; true"),
    ("grep_all", "grep -rn 'alpha beta' . > /dev/null; true"),
    ("find", "find topic03 -name 'note1*' > /dev/null"),
    ("append", "echo line >> topic04/note00.md"),
    ("sed_i", "sed -i 's/alpha/ALPHA/g' topic04/note01.md"),
    ("heredoc", "cat > topic05/new{n}.md <<'EOF'\nhello\nEOF"),
    (
        "save_tmp_rename",
        "printf 'x\\n' > topic05/.s{n}.tmp && mv topic05/.s{n}.tmp topic05/saved.md",
    ),
    ("mv", "mv topic06/note{n:02d}.md topic06/moved{n}.md"),
    ("rm", "rm topic07/note{n:02d}.md"),
    (
        "python_edit",
        "python3 -c \"import pathlib; p = pathlib.Path('topic08/note00.md'); "
        "p.write_text(p.read_text().replace('beta', 'Beta'))\"",
    ),
)
COMMAND_RUNS = 3  # the first warms the caches; the others are measured


# ------------------------------------------------------------------ flush
FLUSH_DATA = (b"y" * 1023) + b"\n"


def flush_path(i: int) -> str:
    """The i-th flush file, 100 to a directory (the server-alone floor uses the same)."""
    return f"/d{i // 100:02d}/f{i:05d}.txt"


def write_flush_files(root: Path, n: int) -> float:
    """Create `n` new 1 KiB files under root; returns the seconds it took."""
    t0 = time.perf_counter()
    for i in range(n):
        p = root / flush_path(i).lstrip("/")
        if i % 100 == 0:
            p.parent.mkdir()
        fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, FLUSH_DATA)
        os.close(fd)
    return time.perf_counter() - t0
