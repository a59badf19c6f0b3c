"""Markdown tables of ``taskloom bench op --json`` files: per shape, each system's GFLOP/s
and taskloom's ratio to each peer; per file, the geometric mean of the ratios.

    python bench/summarize_ops.py bench/results/<run>/*.json
"""
from __future__ import annotations

import json
import math
import sys


def table(path: str) -> str:
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
    geo = [f"{math.exp(sum(map(math.log, v)) / len(v)):.2f}x" if v else "—" for v in ratios.values()]
    lines.append("| **geometric mean** | " + " | ".join([""] * len(systems) + [f"**{x}**" for x in geo]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print("\n\n".join(table(p) for p in sys.argv[1:]))
