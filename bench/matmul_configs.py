"""Matmul template configs side by side, with ONNX Runtime as the yardstick: each config's
kernel (built straight from the template, B packed by the kernel) and ORT's one-node MatMul
timed in the same rounds (``taskloom.bench.timing.time_rounds``), so that drift hits all.

    python bench/matmul_configs.py 512,512,512 6,4,144,906,1024,2,1 8,3,192,680,1024,2,1

A config is ``mr,nv,kc,mc,nc,pm,pn`` (:class:`MatmulConfig`); with none, the analytic
model's top five. ``--pack-a`` adds, for each config that reads A in place, the same config
told to pack A. Prints each config's median ms, GFLOP/s and ORT's time over its own.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable

import numpy as np

import taskloom
from taskloom.bench.op import MatmulProblem, ort_call
from taskloom.bench.timing import machine, medians, time_rounds
from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program
from taskloom.target.cpu import CpuTarget
from taskloom.tune.model import rank


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shape", help="M,N,K")
    p.add_argument("configs", nargs="*", help="mr,nv,kc,mc,nc,pm,pn")
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--pack-a", action="store_true", help="also time each config with A packed")
    args = p.parse_args(argv)
    target = CpuTarget.host()
    M, N, K = (int(v) for v in args.shape.split(","))
    shape = (1, M, N, K)
    configs = [MatmulConfig(*(int(v) for v in c.split(","))) for c in args.configs] or \
        [c for c, _ in rank(shape, target)[:5]]
    # the inputs and ORT model of `bench op`, 2-d as there (the kernel takes them as a batch of 1)
    problem = MatmulProblem((M, N, K), argparse.Namespace(batch=None))
    a, b = problem.arrays["a"][None], problem.arrays["b"][None]
    want = problem.reference()[None]
    built: list[tuple[str, bool, Callable[[], object]]] = []  # (label, reads A in place, call)
    for c in configs:
        for a_stride in (None, 0) if args.pack_a else (None,):
            program = matmul_program(shape, c, target, a_stride=a_stride)
            if a_stride == 0 and not built[-1][1]:
                continue  # A is packed anyway
            kernel = taskloom.build(program).matmul
            out = np.zeros((1, M, N), np.float32)
            kernel(a, b, out)
            np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3)
            label = f"{c.mr}x{c.nv} kc{c.kc} mc{c.mc} {c.pm}x{c.pn}, A {'packed' if program.attr('packs_a') else 'in place'}"
            built.append((label, not program.attr("packs_a"), lambda k=kernel, o=out: k(a, b, o)))
    calls = {label: call for label, _, call in built}
    calls["ort"] = ort_call(problem, target.num_cores)
    times = time_rounds(calls, repeats=args.repeats, rounds=args.rounds)
    med = medians(times)  # ms
    print(f"machine: {machine()}\n{M}x{N}x{K}, median of {args.rounds} rounds of {args.repeats} runs")
    print("| config | ms | GFLOP/s | ORT ms / config ms |\n|---|---|---|---|")
    for k, s in med.items():
        print(f"| {k} | {s:.4f} | {2 * M * N * K / s / 1e6:.1f} | {med['ort'] / s:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
