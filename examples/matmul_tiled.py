"""A tiled fp32 matmul written in the kernel script, checked against numpy and timed.

The schedule lives in the program: ``spatial(P) * repeat(R)`` hands each of the P cores
a contiguous band of R row tiles. For each KC x NR panel of B (packed into a contiguous
buffer that stays in L1), the band's tiles stream past it; each tile is an MR x NR block
of vector registers accumulated with FMAs. Edges are masked, so any M, N, K works with no
padding, and one build serves every shape.

    python examples/matmul_tiled.py [M N K] [--isa avx2]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import taskloom
from taskloom.ir import cdiv, f32, i32, repeat, spatial, vec
from taskloom.script import kernel
from taskloom.target import CpuTarget, get_target


def make_matmul(target: CpuTarget, mr: int | None = None, kc: int | None = None):
    """The matmul kernel, with its tile sizes read off ``target`` (``mr`` rows per register
    tile and ``kc`` as the K block override them)."""
    P = target.num_cores
    lanes = target.vector_lanes(f32)            # 16 with AVX-512, 8 with AVX2
    NV = 2                                      # vectors per tile row: NR = 2 * lanes columns
    NR = NV * lanes
    # accumulators + NV loads of B + one broadcast of A must fit the vector register file
    MR = mr or min(8, (target.num_vector_registers - NV - 1) // NV)
    # a KC x NR panel of B fills two thirds of L1, leaving room for the rows of A
    KC = kc or min(512, max(64, 2 * target.l1d_bytes // 3 // (NR * 4)))
    fvec = vec(f32, lanes)

    @kernel
    def matmul(M: i32, N: i32, K: i32, A: f32[M, K], B: f32[K, N], C: f32[M, N]):
        """C = A @ B, fp32, row-major."""
        MT = cdiv(M, MR)
        for w in parallel(P):
            panel = local_tensor(f32, [KC, NR])
            for kb in range(cdiv(K, KC)):
                k0 = kb * KC
                kn = min(K - k0, KC)
                for tj in range(cdiv(N, NR)):
                    "pack the KC x NR panel of B contiguously: rows of B a power of two apart would share L1 sets"
                    for k in range(kn):
                        for v in unroll(NV):
                            cols = max(min(N - tj * NR - v * lanes, lanes), 0)
                            vstore(panel[k, v * lanes], vload(B[k0 + k, tj * NR + v * lanes], lanes, cols))
                    for ti in (spatial(P) * repeat(cdiv(MT, P))).on(w):
                        if ti < MT:
                            acc = register_tensor(fvec, [MR, NV])
                            for i, v in repeat(MR, NV).on(0):
                                cols = max(min(N - tj * NR - v * lanes, lanes), 0)
                                row = min(ti * MR + i, M - 1)
                                if kb == 0:
                                    acc[i, v] = broadcast(0.0, lanes)
                                else:
                                    acc[i, v] = vload(C[row, tj * NR + v * lanes], lanes, cols)
                            for k in range(kn):
                                for v in unroll(NV):
                                    b = vload(panel[k, v * lanes], lanes)
                                    for i in unroll(MR):
                                        "rows past M read row M-1 and are never stored"
                                        a = A[min(ti * MR + i, M - 1), k0 + k]
                                        acc[i, v] = fma(broadcast(a, lanes), b, acc[i, v])
                            for i, v in repeat(MR, NV).on(0):
                                if ti * MR + i < M:
                                    cols = max(min(N - tj * NR - v * lanes, lanes), 0)
                                    vstore(C[ti * MR + i, tj * NR + v * lanes], acc[i, v], cols)

    return matmul


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", nargs="*", type=int, default=[1024, 1024, 1024], help="M N K")
    ap.add_argument("--isa", default=None, help="target ISA: avx2 or avx512 (default: this machine)")
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    M, N, K = (args.shape * 3)[:3] if len(args.shape) == 1 else args.shape
    target = get_target(f"cpu -isa={args.isa}" if args.isa else None)

    t0 = time.perf_counter()
    module = taskloom.build(make_matmul(target), target)
    build_s = time.perf_counter() - t0
    matmul = module["matmul"]

    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, K), dtype=np.float32)
    B = rng.standard_normal((K, N), dtype=np.float32)
    C = np.empty((M, N), dtype=np.float32)
    matmul(A, B, C)
    ref = A @ B
    err = float(np.max(np.abs(C - ref)) / max(1.0, float(np.max(np.abs(ref)))))
    if not err < 1e-4:
        raise SystemExit(f"wrong result: max relative error {err:.3g}")

    flop = 2.0 * M * N * K
    t_tl = median_seconds(lambda: matmul(A, B, C), args.repeats)
    t_np = median_seconds(lambda: np.matmul(A, B, out=C), args.repeats)
    print(f"matmul {M}x{N}x{K} fp32 on {target.name}, {target.num_cores} cores, "
          f"{target.vector_bits}-bit vectors (built in {build_s:.2f} s)")
    print(f"  taskloom : {t_tl * 1e3:8.3f} ms  {flop / t_tl / 1e9:7.1f} GFLOP/s   max rel err {err:.1e}")
    print(f"  numpy    : {t_np * 1e3:8.3f} ms  {flop / t_np / 1e9:7.1f} GFLOP/s")
    print(f"  generated C: {module.source_path}")


if __name__ == "__main__":
    main()
