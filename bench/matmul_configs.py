"""Matmul template configs side by side, with ONNX Runtime as the yardstick: each config's
kernel (built straight from the template, B packed by the kernel) and ORT's one-node MatMul
timed in the same rounds (``taskloom.bench.timing.time_rounds``), so that drift hits all.

    python bench/matmul_configs.py 512,512,512 6,4,144,906,1024,2,1 8,3,192,680,1024,2,1

A config is ``mr,nv,kc,mc,nc,pm,pn`` (:class:`MatmulConfig`); with none, the analytic
model's top five. Prints each config's median ms, GFLOP/s and ORT's time over its own.
"""
from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

import taskloom
from taskloom.bench.timing import machine, time_rounds
from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program
from taskloom.target.cpu import CpuTarget
from taskloom.tune.model import rank


def ort_matmul(a: np.ndarray, b: np.ndarray, cores: int):
    """ORT's MatMul of ``a`` and ``b`` as a one-node model, all graph optimizations."""
    import onnxruntime as ort
    from onnx import TensorProto, helper
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(x.shape)) for n, x in (("a", a), ("b", b))]
    out = helper.make_tensor_value_info("c", TensorProto.FLOAT, [a.shape[0], a.shape[1], b.shape[2]])
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "matmul", io, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    so = ort.SessionOptions()
    so.intra_op_num_threads = cores
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"a": a, "b": b})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shape", help="M,N,K")
    p.add_argument("configs", nargs="*", help="mr,nv,kc,mc,nc,pm,pn")
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv)
    target = CpuTarget.host()
    M, N, K = (int(v) for v in args.shape.split(","))
    shape = (1, M, N, K)
    configs = [MatmulConfig(*(int(v) for v in c.split(","))) for c in args.configs] or \
        [c for c, _ in rank(shape, target)[:5]]
    rng = np.random.default_rng(0)
    a, b = rng.random((1, M, K), np.float32), rng.random((1, K, N), np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    calls = {}
    for c in configs:
        kernel = taskloom.build(matmul_program(shape, c, target)).matmul
        out = np.zeros((1, M, N), np.float32)
        kernel(a, b, out)
        np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3)
        calls[f"{c.mr}x{c.nv} kc{c.kc} mc{c.mc} {c.pm}x{c.pn}"] = lambda k=kernel, o=out: k(a, b, o)
    calls["ort"] = ort_matmul(a, b, target.num_cores)
    times = time_rounds(calls, repeats=args.repeats, rounds=args.rounds)
    med = {k: statistics.median(t for r in v for t in r) for k, v in times.items()}  # ms
    print(f"machine: {machine()}\n{M}x{N}x{K}, median of {args.rounds} rounds of {args.repeats} runs")
    print("| config | ms | GFLOP/s | ORT ms / config ms |\n|---|---|---|---|")
    for k, s in med.items():
        print(f"| {k} | {s:.4f} | {2 * M * N * K / s / 1e6:.1f} | {med['ort'] / s:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
