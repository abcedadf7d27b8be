"""Timeline plot of a run, in the spirit of Jepsen's: throughput over time, checkpoints, restores,
rescales, and shaded fault windows, so a reader sees at a glance what the faults did to the job."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = ["read_history", "plot_timeline"]


def read_history(path: Path) -> list[dict[str, Any]]:
    """The events of a history file (JSON lines), in order; a damaged line names the file and line."""
    events = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a JSON history event: {e}") from None
    return events


def plot_timeline(history: Path, out: Path, title: str | None = None) -> Path:
    """Write a PNG timeline of ``history`` to ``out`` and return ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = read_history(history)
    if not events:
        raise ValueError(f"{history}: empty history")
    t_end = max(e.get("t", 0) for e in events) or 1
    bin_ms = max(1, t_end / 100)
    out_bins: dict[int, int] = defaultdict(int)
    in_bins: dict[int, int] = defaultdict(int)
    for e in events:
        if e["type"] == "records_out":
            out_bins[int(e["t"] // bin_ms)] += int(e.get("count", 0))
        elif e["type"] == "records_in":
            in_bins[int(e["t"] // bin_ms)] += int(e.get("count", 0))

    fig, ax = plt.subplots(figsize=(11, 4.2), dpi=110)
    for bins, label, color in (
        (in_bins, "records in / s", "#4c72b0"),
        (out_bins, "records out / s", "#55a868"),
    ):
        if bins:
            xs = [i * bin_ms / 1000 for i in range(int(t_end // bin_ms) + 1)]
            ys = [bins.get(i, 0) / (bin_ms / 1000) for i in range(len(xs))]
            ax.plot(xs, ys, label=label, color=color, lw=1.2)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("records / s")

    def label_fault(start: dict[str, Any]) -> None:
        ax.annotate(
            str(start.get("kind", "")),
            (start["t"] / 1000, 1.0),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            color="#8c1c13",
            rotation=90,
            va="top",
        )

    starts: dict[Any, dict[str, Any]] = {}
    shaded = False
    for e in events:
        if e["type"] == "fault_start":
            starts[e.get("fault_id")] = e
        elif e["type"] == "fault_end" and e.get("fault_id") in starts:
            s = starts.pop(e.get("fault_id"))
            ax.axvspan(
                s["t"] / 1000,
                max(e["t"], s["t"] + bin_ms / 4) / 1000,
                color="#c44e52",
                alpha=0.18,
                label=None if shaded else "fault window",
            )
            label_fault(s)
            shaded = True
    for s in starts.values():  # faults without an end (e.g. a crash) are instants
        ax.axvline(
            s["t"] / 1000, color="#c44e52", lw=1.5, ls="-", alpha=0.8, label=None if shaded else "fault"
        )
        label_fault(s)
        shaded = True

    seen: set[str] = set()

    def mark(x: float, style: dict[str, Any], label: str) -> None:
        ax.axvline(x, **style, label=None if label in seen else label)
        seen.add(label)

    for e in events:
        t = e["t"] / 1000
        if e["type"] == "checkpoint_completed":
            mark(t, {"color": "#8172b2", "lw": 0.8, "ls": ":"}, "checkpoint completed")
        elif e["type"] == "checkpoint_aborted":
            mark(t, {"color": "#dd8452", "lw": 1.0, "ls": "--"}, "checkpoint aborted")
        elif e["type"] == "job_restart":
            mark(t, {"color": "#000000", "lw": 1.2, "ls": "-."}, "restart from checkpoint")
        elif e["type"] == "rescale":
            mark(t, {"color": "#937860", "lw": 2.0, "ls": "-"}, "rescale")
    ax.legend(loc="upper right", fontsize=7, framealpha=0.8)
    start = next((e for e in events if e["type"] == "run_start"), {})
    ax.set_title(
        title or f"{start.get('job', 'run')} on {start.get('executor', '?')} (seed {start.get('seed', '?')})",
        fontsize=10,
    )
    ax.set_xlim(0, t_end / 1000)
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
