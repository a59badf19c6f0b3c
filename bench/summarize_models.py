"""One markdown table of ``taskloom bench model --json`` files: per model and batch, each
system's median latency and taskloom's speed-up over it (above 1: taskloom is faster), the
compile times, and the geometric mean of the speed-ups per peer.

    python bench/summarize_models.py bench/results/<run>/*.json [--plot FILE]

``--plot`` also draws every model's latencies, relative to taskloom's, as one bar chart.
"""
from __future__ import annotations

import json
import math
import sys


def main(paths: list[str]) -> str:
    docs = [json.load(open(p)) for p in paths]
    systems = list(dict.fromkeys(r["system"] for d in docs for r in d["rows"]))
    peers = [s for s in systems if s != "taskloom"]
    lines = ["| model | batch | " + " | ".join(f"{s} ms" for s in systems) + " | "
             + " | ".join(f"vs {p}" for p in peers) + " | taskloom compile s |",
             "|---" * (3 + len(systems) + len(peers)) + "|"]
    speedups: dict[str, list[float]] = {p: [] for p in peers}
    errors = []
    for d in docs:
        rows = {r["system"]: r for r in d["rows"]}
        base = rows["taskloom"]["median_ms"]
        cells = []
        for s in systems:
            r = rows.get(s)
            if r is None:
                cells.append("-")
            elif r["median_ms"] is None:
                cells.append("error")
                errors.append(f"- {d['model']} batch {d['batch']}, {s}: {r['error']}")
            else:
                cells.append(f"{r['median_ms']:.1f}")
        ratios = []
        for p in peers:
            r = rows.get(p)
            if base and r and r["median_ms"]:
                speedups[p].append(r["median_ms"] / base)
                ratios.append(f"{r['median_ms'] / base:.2f}x")
            else:
                ratios.append("-")
        compile_s = rows["taskloom"]["compile_s"]
        compiled = f"{compile_s:.1f}" if compile_s else "-"
        lines.append(f"| {d['model']} | {d['batch']} | " + " | ".join(cells) + " | " + " | ".join(ratios)
                     + f" | {compiled} |")
    geo = [f"{math.exp(sum(map(math.log, v)) / len(v)):.2f}x" if v else "-" for v in speedups.values()]
    lines.append("| geomean | | " + " | ".join("" for _ in systems) + " | " + " | ".join(geo) + " | |")
    if errors:
        lines += ["", "Errors:", *errors]
    return "\n".join(lines)


def plot(paths: list[str], out: str) -> None:
    """Grouped bars: per model and batch, each system's latency over taskloom's (log scale;
    above 1: slower than taskloom)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    docs = [json.load(open(p)) for p in paths]
    systems = list(dict.fromkeys(r["system"] for d in docs for r in d["rows"]))
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(1.3 * len(docs) + 2, 4))
    for k, s in enumerate(systems):
        xs, ys = [], []
        for i, d in enumerate(docs):
            rows = {r["system"]: r for r in d["rows"]}
            base, r = rows["taskloom"]["median_ms"], rows.get(s)
            if base and r and r["median_ms"]:
                xs.append(i + (k - (len(systems) - 1) / 2) * width)
                ys.append(r["median_ms"] / base)
        ax.bar(xs, ys, width, label=s)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(docs)), [f"{d['model']}\nbatch {d['batch']}" for d in docs], fontsize=8)
    ax.set_ylabel("latency / taskloom's (above 1: slower)")
    ax.legend(fontsize=8, ncol=len(systems))
    ax.set_title("CPU inference, float32: each system's latency relative to taskloom")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--plot" in args:
        i = args.index("--plot")
        out, args = args[i + 1], args[:i] + args[i + 2:]
        plot(args, out)
    print(main(args))
