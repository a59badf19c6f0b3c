"""Markdown tables of the JSON files ``taskloom bench op --json`` and ``bench model --json``
write, for a results page:

    python -m taskloom.bench.summarize ops bench/results/<run>/*.json
    python -m taskloom.bench.summarize models bench/results/<run>/*.json [--plot FILE]

``ops``: per file, per shape, each system's GFLOP/s and taskloom's ratio to each peer, and the
geometric mean of the ratios. ``models``: one table, per model and batch, each system's median
latency and taskloom's speed-up over it (above 1: taskloom is faster), the compile times and
the geometric mean of the speed-ups per peer; ``--plot`` also draws every model's latencies,
relative to taskloom's, as one bar chart (matplotlib).
"""
from __future__ import annotations

import argparse
import json
import math
import sys


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def op_table(path: str) -> str:
    """The table of one ``bench op --json`` file."""
    doc = json.load(open(path))
    systems = [r["system"] for r in doc["results"][0]["rows"]]
    peers = [s for s in systems if s != "taskloom"]
    lines = [f"### {path.rsplit('/', 1)[-1]}", "", f"`{doc['command']}`", "",
             "| shape | " + " | ".join(f"{s} GFLOP/s" for s in systems) + " | "
             + " | ".join(f"taskloom / {p}" for p in peers) + " |",
             "|---" * (1 + len(systems) + len(peers)) + "|"]
    ratios: dict[str, list[float]] = {p: [] for p in peers}
    for res in doc["results"]:
        g = {r["system"]: r["gflops"] for r in res["rows"]}
        cells = [f"{g[s]:.1f}" if g.get(s) else "error" for s in systems]
        rs = []
        for p in peers:
            if g.get("taskloom") and g.get(p):
                ratios[p].append(g["taskloom"] / g[p])
                rs.append(f"{g['taskloom'] / g[p]:.2f}x")
            else:
                rs.append("—")
        lines.append(f"| {','.join(map(str, res['shape']))} | " + " | ".join(cells + rs) + " |")
    geo = [f"{_geomean(v):.2f}x" if v else "—" for v in ratios.values()]
    lines.append("| **geometric mean** | " + " | ".join([""] * len(systems) + [f"**{x}**" for x in geo]) + " |")
    return "\n".join(lines)


def op_tables(paths: list[str]) -> str:
    """The tables of several ``bench op --json`` files, one after another."""
    return "\n\n".join(op_table(p) for p in paths)


def model_table(paths: list[str]) -> str:
    """One table of several ``bench model --json`` files, with the errors of failed systems."""
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
    geo = [f"{_geomean(v):.2f}x" if v else "-" for v in speedups.values()]
    lines.append("| geomean | | " + " | ".join("" for _ in systems) + " | " + " | ".join(geo) + " | |")
    if errors:
        lines += ["", "Errors:", *errors]
    return "\n".join(lines)


def plot_models(paths: list[str], out: str) -> None:
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
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m taskloom.bench.summarize", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=["ops", "models"], help="what wrote the files: bench op or bench model")
    p.add_argument("paths", nargs="+", metavar="FILE")
    p.add_argument("--plot", metavar="FILE", help="models: also draw the bar chart into FILE")
    args = p.parse_intermixed_args(argv)  # --plot may come between the files
    if args.kind == "ops":
        if args.plot:
            p.error("--plot draws models only")
        print(op_tables(args.paths))
    else:
        if args.plot:
            plot_models(args.paths, args.plot)
        print(model_table(args.paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
