"""Timeline plot of a run, in the spirit of Jepsen's: per operator, records in and out as a rate over
a sliding window; below it one lane per fault showing its window; checkpoints, aborts, restarts and
rescales as marks across both. The title comes from the history alone, so ``run`` and ``report``
draw the same picture."""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from itertools import accumulate
from pathlib import Path
from typing import Any

from harness.history import read_history

__all__ = ["plot_timeline", "timeline_title", "rate_series"]

POINTS = 300  # samples along the time axis


def timeline_title(events: list[dict[str, Any]]) -> str:
    """``<scenario> on <executor> (seed N)``, from ``run_start``."""
    start = next((e for e in events if e["type"] == "run_start"), {})
    name = (start.get("config") or {}).get("scenario") or start.get("job", "run")
    return f"{name} on {start.get('executor', '?')} (seed {start.get('seed', '?')})"


def rate_series(
    points: list[tuple[int, int]], t_end_ms: int, window_ms: int, samples: int = POINTS
) -> tuple[list[float], list[float]]:
    """(seconds, records/s): at each sample time t, the records counted in (t - window, t] divided by
    the window (shorter at the start). A batched count (sim reports every 50 ms) reads as a steady
    rate instead of a sawtooth."""
    points = sorted(points)
    times = [t for t, _ in points]
    cum = [0, *accumulate(c for _, c in points)]
    xs, ys = [], []
    for i in range(samples + 1):
        t = t_end_ms * i / samples
        lo = max(0.0, t - window_ms)
        n = cum[bisect_right(times, t)] - cum[bisect_right(times, lo) if lo > 0 else 0]
        span = max(t - lo, 1e-9)
        xs.append(t / 1000)
        ys.append(n / (span / 1000) if t > 0 else 0.0)
    return xs, ys


def _window_ms(events: list[dict[str, Any]], t_end: int) -> int:
    """A window holding several reports: 4x the median gap between record reports, at least 2% of
    the run (sim reports every 50 ms of simulated time; Spark tasks every batch)."""
    ts = sorted({int(e["t"]) for e in events if e["type"] in ("records_in", "records_out")})
    gaps = sorted(b - a for a, b in zip(ts, ts[1:], strict=False) if b > a)
    median = gaps[len(gaps) // 2] if gaps else 50
    return max(4 * median, t_end // 50, 1)


def _fault_windows(events: list[dict[str, Any]], t_end: int) -> list[tuple[dict[str, Any], int]]:
    starts: dict[Any, dict[str, Any]] = {}
    out = []
    for e in events:
        if e["type"] == "fault_start":
            starts[e.get("fault_id")] = e
        elif e["type"] == "fault_end" and e.get("fault_id") in starts:
            out.append((starts.pop(e.get("fault_id")), int(e["t"])))
    out += [(s, t_end) for s in starts.values()]
    return sorted(out, key=lambda w: int(w[0].get("fault_id") or 0))


def _fault_label(s: dict[str, Any]) -> str:
    """``#3 storage truncate chk-7/_metadata``: id, kind, mode or signal, and a short target."""
    d = s.get("details") or {}
    target = str(s.get("target") or "")
    if "/" in target:
        target = "/".join(Path(target).parts[-2:])
    if target == "checkpoint storage":
        target = ""
    how = d.get("mode") or d.get("signal") or d.get("toxic") or ""
    return " ".join(x for x in (f"#{s.get('fault_id')}", str(s.get("kind")), str(how), target) if x)


def plot_timeline(history: Path, out: Path, title: str | None = None) -> Path:
    """Write a PNG timeline of ``history`` to ``out`` and return ``out``; ``title`` overrides the one
    the history gives (``timeline_title``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = list(read_history(history))  # any engine's history (Structured Streaming's too): as JSON
    if not events:
        raise ValueError(f"{history}: empty history")
    t_end = max(int(e.get("t", 0)) for e in events) or 1
    window = _window_ms(events, t_end)
    series: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e["type"] in ("records_in", "records_out"):
            series[(str(e.get("operator")), e["type"][8:])].append((int(e["t"]), int(e.get("count", 0))))
    faults = _fault_windows(events, t_end)
    lanes = max(1, len(faults))
    fig, (ax, fx) = plt.subplots(
        2,
        1,
        figsize=(12, 5.2 + 0.25 * lanes),
        dpi=110,
        sharex=True,
        gridspec_kw={"height_ratios": [4, 0.8 + 0.35 * lanes]},
    )
    start = next((e for e in events if e["type"] == "run_start"), {})
    operators = [op for op in (start.get("parallelism") or {})] or sorted({op for op, _ in series})
    palette = ["#4c72b0", "#55a868", "#c44e52", "#8172b2", "#937860", "#da8bc3"]
    for i, op in enumerate(operators):
        color = palette[i % len(palette)]
        for direction, style in (("in", "-"), ("out", "--")):
            pts = series.get((op, direction))
            if pts:
                xs, ys = rate_series(pts, t_end, window)
                ax.plot(xs, ys, ls=style, color=color, lw=1.4, label=f"{op} records {direction}")
    ax.set_ylabel(f"records / s ({window / 1000:g} s window)")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)

    marks: dict[str, tuple[dict[str, Any], str]] = {
        "checkpoint_completed": ({"color": "#8172b2", "lw": 0.7, "ls": ":"}, "checkpoint completed"),
        "checkpoint_aborted": ({"color": "#dd8452", "lw": 1.0, "ls": "--"}, "checkpoint aborted"),
        "job_restart": ({"color": "#000000", "lw": 1.4, "ls": "-."}, "job restart"),
        "rescale": ({"color": "#937860", "lw": 2.2, "ls": "-"}, "rescale"),
        "input_held": ({"color": "#999999", "lw": 1.0, "ls": (0, (1, 3))}, "input ended, held for triggers"),
    }
    seen: set[str] = set()
    for e in events:
        if e["type"] in marks:
            mark, label = marks[e["type"]]
            for a in (ax, fx):
                a.axvline(int(e["t"]) / 1000, **mark, label=None if label in seen or a is fx else label)
            seen.add(label)

    for lane, (s, end) in enumerate(faults):
        y = lanes - 1 - lane
        x0, x1 = int(s["t"]) / 1000, int(end) / 1000
        failed = bool((s.get("details") or {}).get("error"))
        color = "#7f7f7f" if failed else "#c44e52"
        width = max(x1 - x0, t_end / 1000 / 400)
        fx.broken_barh([(x0, width)], (y + 0.15, 0.7), color=color, alpha=0.55)
        label = _fault_label(s)
        fx.text(
            x0 + width,
            y + 0.5,
            "  " + label + (" (could not act)" if failed else ""),
            va="center",
            fontsize=8.5,
        )
    fx.set_ylim(0, lanes)
    fx.set_yticks([])
    fx.set_ylabel("faults", rotation=0, ha="right", va="center")
    fx.set_xlabel("time (s)")
    fx.set_xlim(0, t_end / 1000)
    fig.suptitle(title or timeline_title(events), fontsize=11)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(0.80, 0.5), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 0.80, 0.97))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
