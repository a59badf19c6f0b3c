"""Memory-bound operators on the CPU: bandwidth of elementwise kernels against a plain copy,
and softmax / layer_norm rows against torch, all measured in one run.

    python bench/ops_cpu.py [--repeats 30] [--json bench/results/ops_cpu.json]

Each taskloom kernel is the one eager mode builds for the operator (captured with
``capture_tasks``), called with preallocated outputs so that only the kernel is timed.
torch runs with as many threads as taskloom (both cores) in inference mode.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import machine, median_ms, versions  # noqa: E402

import taskloom  # noqa: E402
from taskloom.compiler import compile_task  # noqa: E402
from taskloom.graph import capture_tasks  # noqa: E402


def kernel_of(op, *args, **kwargs):
    """The compiled kernel of ``op(*args)`` and a call running it into preallocated outputs."""
    with capture_tasks() as records:
        outs = op(*args, **kwargs)
    task, inputs = records[-1]
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    kernel = compile_task(task)
    arrays = [t.numpy() for t in inputs]
    results = [np.empty_like(o.numpy()) for o in outs]
    return lambda: kernel(*arrays, *results)


def bandwidth_rows(n: int, repeats: int) -> list[dict]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    dst = np.empty_like(a)
    mib = a.nbytes
    rows = []
    t = median_ms(lambda: np.copyto(dst, a), repeats)
    rows.append({"system": "numpy copyto (1 thread)", "op": "copy", "median_ms": t, "gbps": 2 * mib / t / 1e6})
    identity = lambda x: taskloom.ops.unary("copy", x, lambda v: v)  # noqa: E731  (a parallel copy kernel)
    cases = [("copy", identity, (a,), 2),
             ("add", taskloom.ops.add, (a, b), 3), ("relu", taskloom.ops.relu, (a,), 2),
             ("gelu", taskloom.ops.gelu, (a,), 2)]
    for name, op, args, streams in cases:
        call = kernel_of(op, *args)
        t = median_ms(call, repeats)
        rows.append({"system": "taskloom", "op": name, "median_ms": t, "gbps": streams * mib / t / 1e6})
    return rows


def row_op_rows(repeats: int) -> list[dict]:
    import torch
    torch.set_num_threads(taskloom.host_target().num_cores)
    rows = []
    rng = np.random.default_rng(1)
    for r, c in [(4096, 768), (1024, 3072), (128, 768), (128, 3072)]:
        x = rng.standard_normal((r, c), dtype=np.float32)
        g, b = rng.standard_normal(c, dtype=np.float32), rng.standard_normal(c, dtype=np.float32)
        xt, gt, bt = torch.from_numpy(x), torch.from_numpy(g), torch.from_numpy(b)
        with torch.inference_mode():
            for name, tl, th in [
                ("softmax", kernel_of(taskloom.ops.softmax, x, axis=-1), lambda: torch.softmax(xt, -1)),
                ("layer_norm", kernel_of(taskloom.ops.layer_norm, x, (c,), g, b),
                 lambda: torch.nn.functional.layer_norm(xt, (c,), gt, bt))]:
                t_tl = median_ms(tl, repeats)
                t_th = median_ms(th, repeats)
                rows.append({"op": name, "shape": [r, c], "taskloom_ms": t_tl, "torch_ms": t_th,
                             "speedup": t_th / t_tl})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--elements", type=int, default=16 * 1024 * 1024)
    ap.add_argument("--json", type=pathlib.Path, default=None)
    args = ap.parse_args()
    bw = bandwidth_rows(args.elements, args.repeats)
    copy = max(r["gbps"] for r in bw if r["op"] == "copy")
    print(f"elementwise on {args.elements} float32 (median of {args.repeats}); plain copy = best copy = {copy:.1f} GB/s")
    for r in bw:
        r["fraction_of_copy"] = r["gbps"] / copy
        print(f"  {r['op']:6s} {r['system']:24s} {r['median_ms']:8.3f} ms {r['gbps']:7.1f} GB/s  {r['fraction_of_copy']:5.0%} of copy")
    rows = row_op_rows(args.repeats)
    print("row operators vs torch (both cores)")
    for r in rows:
        print(f"  {r['op']:10s} {str(tuple(r['shape'])):13s} taskloom {r['taskloom_ms']:7.3f} ms  "
              f"torch {r['torch_ms']:7.3f} ms  speed-up {r['speedup']:.2f}x")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"bandwidth": bw, "rows": rows, "machine": machine(),
                                         "versions": versions(), "command": " ".join(sys.argv)}, indent=2))


if __name__ == "__main__":
    main()
