"""Progress on long work, on a terminal only: `tqdm` bars on stderr, nothing on a pipe.

Work reports into a `memfs.sync.progress.Tracker` (plain data, no I/O). Whoever faces a
terminal draws it: the daemon in the foreground (start-up, final flush), or the CLI
(`memfs sync`, `memfs unmount`, which ask the daemon's `progress` op while they wait;
`memfs store import`/`export`). When stderr is not a terminal nothing is drawn, so JSON
on stdout and logs in a pipe stay clean; `tqdm` is not even imported then.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import IO, ClassVar

from memfs.control.protocol import PhaseEnded, ProgressAnswer, UnmountAnswer
from memfs.sync.progress import Tracker

# The exit message names this many paths, then "and N more".
NAMED_PATHS = 10
POLL_INTERVAL = 0.2  # seconds between the CLI's looks at the daemon's progress


def printable(text: str) -> str:
    """Escape control characters, newlines included, so a hostile name can neither drive
    the terminal nor forge a line of output."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def on_terminal(stream: IO[str] | None = None) -> bool:
    stream = stream if stream is not None else sys.stderr
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (ValueError, OSError):  # closed
        return False


class Bar:
    """One line: "<label> 212 of 300 files" (or "<label> 1200 memories" with no total)."""

    def __init__(
        self,
        label: str,
        total: int | None = None,
        unit: str = "files",
        stream: IO[str] | None = None,
    ) -> None:
        from tqdm import tqdm

        self.unit = unit
        count = "{n} of {total}" if total is not None else "{n}"
        shape = "{desc} " + count + f" {unit}" + (" [{bar:20}]" if total is not None else "")
        stream = stream or sys.stderr
        cols, rows = _size(stream)
        self._bar = tqdm(
            desc=label,
            total=total,
            file=stream,
            bar_format=shape,
            ascii=True,
            leave=True,
            mininterval=0.1,
            ncols=cols,
            nrows=rows,
        )

    def update(self, done: int, total: int | None = None) -> None:
        if total is not None and total != self._bar.total:
            self._bar.total = total
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        self._bar.close()


def _size(stream: IO[str]) -> tuple[int, int]:
    """The terminal's size; 80x24 where it reports none (a fresh pty says 0x0, and tqdm
    would then draw nothing)."""
    try:
        size = os.get_terminal_size(stream.fileno())
        return size.columns or 80, size.lines or 24
    except (OSError, ValueError, AttributeError):
        return 80, 24


class Display:
    """Bars for the phases some trackers go through, drawn as they happen.

    `names` maps a tracker phase to what the line says ("pushing" -> "flushing"); a
    phase missing from it is not drawn. Log lines written to stderr meanwhile are
    routed above the bars, so neither breaks the other.
    """

    UNITS: ClassVar[dict[str, str]] = {"listing": "memories"}

    def __init__(self, names: dict[str, str], stream: IO[str] | None = None) -> None:
        self.names = names
        self.stream = stream or sys.stderr
        self.bars: dict[str, tuple[str, Bar]] = {}
        self._logs = ExitStack()
        self._watching: list[tuple[Tracker, Callable[[Tracker], None]]] = []

    @classmethod
    def for_terminal(cls, names: dict[str, str]) -> Display | None:
        return cls(names) if on_terminal() else None

    def watch(self, label: str, tracker: Tracker) -> None:
        def seen(t: Tracker) -> None:
            self.show(label, t.phase, t.done, t.total)

        tracker.watchers.append(seen)
        self._watching.append((tracker, seen))
        if tracker.phase:
            seen(tracker)

    def show(self, label: str, phase: str, done: int, total: int | None) -> None:
        current = self.bars.get(label)
        if current is not None and current[0] != phase:
            current[1].close()
            del self.bars[label]
            current = None
        if phase not in self.names:
            self._release_logs()
            return
        if current is None:
            if not self.bars:
                self._route_logs()
            text = f"{label}: {self.names[phase]}" if label else self.names[phase]
            current = self.bars[label] = (
                phase,
                Bar(text, total, self.UNITS.get(phase, "files"), self.stream),
            )
        current[1].update(done, total)

    def finish(self, label: str, last: PhaseEnded | None) -> None:
        """Bring a bar to where its phase ended (seen after the last look)."""
        current = self.bars.get(label)
        if current is not None and last is not None and last.phase == current[0]:
            current[1].update(last.done, last.total)

    def close(self) -> None:
        for tracker, seen in self._watching:
            if seen in tracker.watchers:
                tracker.watchers.remove(seen)
        self._watching.clear()
        for _, bar in self.bars.values():
            bar.close()
        self.bars.clear()
        self._release_logs()

    def _route_logs(self) -> None:
        from tqdm.contrib.logging import logging_redirect_tqdm

        self._logs.enter_context(logging_redirect_tqdm())

    def _release_logs(self) -> None:
        if not self.bars:
            self._logs.close()


@contextmanager
def following(ask: Callable[[], ProgressAnswer | None], names: dict[str, str]) -> Iterator[None]:
    """While the body waits for the daemon, draw what `ask()` (its `progress` op) says.

    `ask` runs in a thread every POLL_INTERVAL; it returns the daemon's answer or None
    (no answer: nothing changes on screen).
    """
    display = Display.for_terminal(names)
    if display is None:
        yield
        return
    stop = threading.Event()
    lock = threading.Lock()

    def poll() -> None:
        while not stop.wait(POLL_INTERVAL):
            answer = ask()
            if not answer:
                continue
            with lock:
                if stop.is_set():
                    return
                for s in answer.stores:
                    display.finish(s.label, s.last)
                    display.show(s.label, s.phase, s.done, s.total)

    thread = threading.Thread(target=poll, name="memfs-progress", daemon=True)
    thread.start()
    answered = False
    try:
        yield
        answered = True
    finally:
        stop.set()
        # Where the phases shown really ended (not after Ctrl-C: that must exit now).
        last = ask() if answered and display.bars else None
        with lock:
            for s in last.stores if last is not None else []:
                display.finish(s.label, s.last)
            display.close()


def _named(items: Sequence[str]) -> str:
    """Up to NAMED_PATHS items, then "and N more"."""
    named = ", ".join(printable(i) for i in items[:NAMED_PATHS])
    more = len(items) - NAMED_PATHS
    return named + (f" and {more} more" if more > 0 else "")


def left_lines(report: UnmountAnswer, prog: str = "memfs") -> list[str]:
    """The exit message after a final sync that left files the store does not have:
    changed files not pushed (the next start pushes them) and files the store refused
    (only in the cache until their content changes); up to 10 paths each."""
    lines = []
    for store_id, paths in report.unpushed.items():
        files, stay = ("file", "it stays") if len(paths) == 1 else ("files", "they stay")
        lines.append(
            f"{prog}: {len(paths)} changed {files} of {store_id} could not be "
            f"pushed; {stay} in the journal for the next start: {_named(paths)}"
        )
    for store_id, found in report.refused.items():
        files = "1 file" if len(found) == 1 else f"{len(found)} files"
        lines.append(
            f"{prog}: {files} of {store_id} not in the store, which refused them; only "
            "the cache holds them until their content changes: "
            + _named([f"{f.path} ({f.why})" for f in found])
        )
    return lines
