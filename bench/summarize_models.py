"""One markdown table of ``taskloom bench model --json`` files: per model and batch, each
system's median latency and taskloom's speed-up over it (above 1: taskloom is faster), the
compile times, and the geometric mean of the speed-ups per peer.

    python bench/summarize_models.py bench/results/<run>/*.json
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


if __name__ == "__main__":
    print(main(sys.argv[1:]))
