"""What the SIMT emulator, ptxas and the SASS say of taskloom's CUDA kernels, where no GPU is
at hand: for each kernel class, the schedule the CUDA path picks against the plain rule (a
thread an element), in warp instructions, global-memory requests and sectors, shared-memory
bank conflicts, and ptxas's registers and spills; then, for each config of the CUDA-core
matmul template, its main loop's instructions in SASS (``cuobjdump -sass``, which needs
``nvdisasm`` on PATH: pip ``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm``). Prints
markdown tables; ``--json`` keeps the numbers.

    .venv/bin/python bench/cuda_counters.py [--arch sm_90a] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
from collections import Counter
from typing import Any

import numpy as np

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.schedule.cuda import schedule_task_cuda
from taskloom.schedule.cuda.matmul import matmul_candidate
from taskloom.target import CudaTarget

rng = np.random.default_rng(0)


def cases() -> list[tuple[str, Graph]]:
    """(name, a graph of one fused group) for each kernel class."""
    x = input((64, 768), name="x")
    long = input((8, 4096), name="long")
    a = input((256, 256), name="a")
    w = taskloom.asarray(rng.standard_normal((256, 256)).astype(np.float32))
    return [("softmax 64x768", Graph([x], [ops.softmax(x, axis=-1)])),
            ("layer_norm 64x768", Graph([x], [ops.layer_norm(x, (768,))])),
            ("sum of rows 8x4096", Graph([long], [ops.sum(long, axis=-1)])),
            ("matmul+relu 256^3", Graph([a], [ops.relu(ops.matmul(a, w))]))]


def measure(name: str, graph: Graph, target: CudaTarget, schedule: str) -> dict[str, Any]:
    """Counters of one launch of the graph's kernel, as the CUDA path schedules it
    (``chosen``) or by the plain rule (``rule``: a thread an element)."""
    [group] = fuse_graph(graph)
    found = matmul_candidate(group.task, target) if schedule == "chosen" else None
    if found is not None:
        from taskloom.schedule.cuda.matmul import choose_config
        fn = found.build(choose_config(found.tunable, target.num_sms), "k").fn
    elif schedule == "chosen":
        fn = schedule_task_cuda(group.task, target, "k")
    else:
        from taskloom.schedule.cuda.rules import per_element_kernel
        fn = per_element_kernel(group.task, "k")
    module = taskloom.build(fn, target=target, device="emulator")
    feeds = {id(t): rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in graph.inputs}
    args = [feeds[id(t)] if id(t) in feeds else t.numpy() for t in group.inputs]
    out = np.zeros(tuple(int(d) for d in graph.outputs[0].shape), np.float32)
    c = module["k"](*args, out).counters
    r = module.built.resources["k"]
    return {"kernel": name, "schedule": fn.attr("doc").split(": ", 1)[1], "warp_instructions": sum(c.instructions.values()),
            "global_load_requests": c.global_load_requests, "global_load_sectors": c.global_load_sectors,
            "bank_conflicts": c.bank_conflicts, "registers": r.registers, "spills": r.spill_stores + r.spill_loads}


def main_loop(lib_path: str) -> dict[str, int] | None:
    """Instruction counts of the kernel's main loop (the span of its backward branch) in the
    library's SASS; None without cuobjdump."""
    if shutil.which("cuobjdump") is None:
        return None
    sass = subprocess.run(["cuobjdump", "-sass", lib_path], capture_output=True, text=True).stdout
    code = [(int(m.group(1), 16), m.group(2).split(".")[0].rstrip(";"), m.group(3))
            for m in re.finditer(r"/\*([0-9a-f]{4})\*/\s+(?:@!?U?P\w+\s+)?(\S+)\s*([^;]*)", sass)]
    for addr, op, rest in code:
        jump = re.match(r"(0x[0-9a-f]+)", rest)
        if op == "BRA" and jump and int(jump.group(1), 16) < addr:
            loop = Counter(o for a, o, _ in code if int(jump.group(1), 16) <= a <= addr)
            return {"instructions": sum(loop.values()), **{k: loop[k] for k in ("FFMA", "LDS", "LDG", "STS", "BAR")}}
    return None


def template_loops(target: CudaTarget) -> list[dict[str, Any]]:
    """The main loop of each config of the matmul template, on a 256^3 matmul with a relu."""
    from taskloom.schedule.cuda.matmul import CONFIGS
    a = input((256, 256), name="a")
    [group] = fuse_graph(Graph([a], [ops.relu(ops.matmul(a, taskloom.asarray(rng.standard_normal((256, 256))
                                                                                   .astype(np.float32))))]))
    found = matmul_candidate(group.task, target)
    rows = []
    for config in CONFIGS:
        module = taskloom.build(found.build(config, "k").fn, target=target, device="emulator")
        rows.append({"config": str(config), **(main_loop(str(module.built.lib_path)) or {})})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    target = CudaTarget.from_arch(args.arch)
    rows = [measure(name, graph, target, s) for name, graph in cases() for s in ("rule", "chosen")]
    head = ["kernel", "schedule", "warp_instructions", "global_load_requests", "global_load_sectors",
            "bank_conflicts", "registers", "spills"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(f"{r[h]:,}" if isinstance(r[h], int) else str(r[h]) for h in head) + " |")
    loops = template_loops(target)
    print("\n| matmul config | main-loop instructions | FFMA | LDS | LDG | STS | BAR |\n|---|---|---|---|---|---|---|")
    for r in loops:
        cells = [str(r.get(k, "-")) for k in ("instructions", "FFMA", "LDS", "LDG", "STS", "BAR")]
        print(f"| {r['config']} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"arch": args.arch, "rows": rows, "matmul_main_loops": loops}, f, indent=2)


if __name__ == "__main__":
    main()
