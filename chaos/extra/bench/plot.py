"""Scaling plot of a bench JSON report: each figure's ratio against its size, one panel per module,
so growth (or its absence) is visible. ``python -m chaos.extra.bench.plot bench.json docs/img/bench-scaling.png``"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = ["plot_report"]

# which size label is the x axis, in order of preference
_AXES = ("state_bytes", "records", "keys", "full_bytes")


def _x(size: dict[str, Any]) -> tuple[str, float] | None:
    for k in _AXES:
        if k in size:
            return k, float(size[k])
    return None


def plot_report(report: dict[str, Any], out: Path) -> Path:
    """Write a PNG with one log-x panel per module: ratio per figure over its size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mods = {n: m for n, m in report["modules"].items() if m.get("status") == "ok" and m.get("figures")}
    fig, axes = plt.subplots(1, max(1, len(mods)), figsize=(5 * max(1, len(mods)), 4), squeeze=False)
    for ax, (name, m) in zip(axes[0], mods.items(), strict=False):
        series: dict[str, list[tuple[float, float]]] = defaultdict(list)
        target: dict[str, float] = {}
        labels: set[str] = set()
        for f in m["figures"]:
            x = _x(f["size"])
            if x is None:
                continue
            labels.add(x[0])
            series[f["name"]].append((x[1], f["ratio"]))
            if f.get("target") is not None:
                target[f["name"]] = f["target"]
        for fname, pts in series.items():
            pts.sort()
            line = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=fname)[0]
            if fname in target:
                ax.axhline(target[fname], color=line.get_color(), linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(name)
        ax.set_xlabel(" / ".join(sorted(labels)))
        ax.set_ylabel("ratio to same-run baseline (dotted: target)")
        ax.legend(fontsize=6)
    title = "statechaos bench" + (" --quick" if report.get("quick") else "")
    fig.suptitle(f"{title}: {report.get('machine', {}).get('cpus', '?')} CPUs")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m chaos.extra.bench.plot BENCH.json OUT.png", file=sys.stderr)
        return 2
    plot_report(json.loads(Path(args[0]).read_text()), Path(args[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
