"""The chart of docs/performance.md (issue 14): memfs/native and rclone/native side by side.

One bar pair per per-operation row of table 1 and one for the agent workload of table 2,
drawn from the same `summary()` cells the tables print: the bar is the median, the whisker
the min–max over the repeats. Higher is faster everywhere: table 1's ratios already are
(x/native, listdir native/x), and the workload's wall-time ratio is drawn inverted
(native time / time, per repeat). Case 2c adds a third bar, a `--read-only` mount
(zero-message opens), to repeated reads and to `grep -r` and `ls -R` (table 2c, timed
commands drawn inverted too), and the agent workload a bar for a mount with a session
store's options. matplotlib is a bench-only extra (`.[bench]`); without it
`draw` says why and the report goes out without the chart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import summary

Cell = dict[str, Any]  # a summary() cell: median, min, max, n, values
ENGINES = (
    ("memfs", "#1f77b4", "memfs (default) / native"),
    ("memfs_open", "#9467bd", "memfs --open-requests / native"),
    ("rclone", "#ff7f0e", "rclone / native"),
    ("memfs_ro", "#2ca02c", "memfs --read-only / native"),
    ("memfs_ses", "#17becf", "session store (worker adapter's options) / native"),
)


def _inverted(cell: Cell | None) -> Cell | None:
    """A time ratio (lower is faster) as a speed ratio (higher is faster), repeat by repeat."""
    if not cell or not cell.get("values"):
        return None
    return summary([1.0 / v for v in cell["values"] if v])


def bars(r: dict[str, Any]) -> list[tuple[str, dict[str, Cell | None]]]:
    """(label, {engine: cell}) for every bar pair, in the tables' order."""
    out: list[tuple[str, dict[str, Cell | None]]] = []
    ro = r.get("readonly") or {}
    for op, row in (r.get("perop") or {}).get("ops", {}).items():
        label = op.removesuffix("_ms")
        cells = {e: row.get(f"{e}_vs_native") for e, _, _ in ENGINES}
        if op == "read_warm" and ro:
            cells["memfs_ro"] = ro["repeated_read"]["python"]["memfs_ro_vs_native"]
            cells.setdefault("memfs_open", None)
        out.append((label, cells))
    for name, label in (("grep_all", "grep -r, 1,000 files"), ("ls_R", "ls -R")):
        row = ro.get("rows", {}).get(name)
        if row:
            out.append(
                (
                    f"{label}\n(native time / time)",
                    {
                        e: _inverted(row.get(f"{e}_vs_native"))
                        for e, _, _ in ENGINES
                        if e != "rclone"
                    },
                )
            )
    ag = r.get("agent")
    if ag:
        out.append(
            (
                "agent workload\n(native time / time)",
                {e: _inverted(ag[e].get("vs_native")) for e, _, _ in ENGINES if e in ag},
            )
        )
    return out


def draw(r: dict[str, Any], path: Path) -> str | None:
    """Write the chart as a PNG at `path`; None when written, else why not (one line)."""
    data = bars(r)
    if not data:
        return "no per-operation or agent-workload results to chart"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (.venv/bin/pip install -e '.[bench]')"

    fig, ax = plt.subplots(figsize=(12, 5.4), dpi=110)
    width = 0.8 / len(ENGINES)
    values: list[float] = []
    for i, (engine, colour, legend) in enumerate(ENGINES):
        xs: list[float] = []
        meds: list[float] = []
        lo: list[float] = []
        hi: list[float] = []
        for x, (_label, cells) in enumerate(data):
            c = cells.get(engine)
            if not c or c.get("median") is None:
                continue
            xs.append(x + (i - (len(ENGINES) - 1) / 2) * width)
            meds.append(c["median"])
            lo.append(c["median"] - c["min"])
            hi.append(c["max"] - c["median"])
            values += [c["min"], c["max"]]
        if not xs:
            continue
        ax.bar(
            xs,
            meds,
            width,
            color=colour,
            label=legend,
            yerr=[lo, hi],
            capsize=2,
            error_kw={"elinewidth": 0.8, "alpha": 0.6},
        )
        for at, m, up in zip(xs, meds, hi, strict=True):
            ax.annotate(
                f"{m:.2f}" if m >= 0.1 else f"{m:.2g}",
                (at, m + up),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
            )
    ax.set_yscale("log")
    top, bottom = max([*values, 1.0]) * 3, min([*values, 1.0]) / 2
    ax.set_ylim(bottom, top)
    ax.axhline(1.0, color="black", linewidth=1, label="native = 1.0")
    if r.get("agent") and len(data) > 1:  # table 1's rows | table 2's workload
        ax.axvline(len(data) - 1.5, color="grey", linestyle="--", linewidth=0.8)
    ax.axhspan(1.0, top, color="green", alpha=0.05)
    ax.axhspan(bottom, 1.0, color="red", alpha=0.05)
    ax.text(-0.45, top / 1.15, "↑ faster than native", va="top", fontsize=9, color="green")
    ax.text(-0.45, bottom * 1.15, "↓ slower than native", va="bottom", fontsize=9, color="darkred")
    ax.set_xticks(
        range(len(data)), [label for label, _ in data], rotation=30, ha="right", fontsize=8
    )
    ax.set_xlim(-0.6, len(data) - 0.4)
    ax.set_ylabel("speed relative to native (log scale)")
    mc = r.get("machine", {})
    ax.set_title(
        "memfs (default, --open-requests, --read-only, a session store's options) and rclone "
        "relative to the native disk\n"
        f"({r.get('mode', '?')} run, {mc.get('date', '')}); "
        "bar = median, whisker = min–max",
        fontsize=10,
    )
    ax.legend(loc="upper center", ncols=3, fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return None
