"""A symbolic-rows matmul's last tile of rows: clamped (a full tile, its rows past M computed
and dropped) against ``exact_rows`` (a micro-kernel for each count of last rows), in one
process, the two taking turns.

    python bench/last_rows.py kernel 3072 768          # one kernel, 8x3v tiles, N K
    python bench/last_rows.py model 1,7 3,7 1,128      # BERT-base compiled dynamic, batch,seq

``kernel`` times the template's kernel (B prepacked and prefetched, A read in place) at
7 to 190 rows; ``model`` compiles BERT-base once with each setting of
``drivers.FEW_ROWS_TILES`` (0: no variant gets exact rows) and a static compile per shape,
and prints each one's median ms and its ratio to the static compile.
"""
from __future__ import annotations

import statistics
import sys
import time
from typing import Any, Callable

import numpy as np


def _turns(systems: dict[str, Callable[[], Any]], rounds: int, repeats: int) -> dict[str, float]:
    """Median ms a call of each system over ``rounds`` in rotating order."""
    times: dict[str, list[float]] = {k: [] for k in systems}
    names = list(systems)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            systems[name]()
            t = time.perf_counter()
            for _ in range(repeats):
                systems[name]()
            times[name].append((time.perf_counter() - t) / repeats * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def kernel(N: int, K: int) -> None:
    import taskloom
    from taskloom.ir import expr as E
    from taskloom.ir import stmt as S
    from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program, pack_b_panels
    from taskloom.target import host_target
    target, M = host_target(), E.var("M")

    def build(exact: bool) -> tuple[Any, MatmulConfig]:
        config = MatmulConfig(8, 3, 256, 256, 1024, 1, 2, exact_rows=exact)
        p = matmul_program((1, M, N, K), config, target, prepacked_b=1, prefetch_b=True, a_stride=K)
        return taskloom.build(S.Function("matmul", (M, *p.params), p.body, p.kind, p.attrs), target)["matmul"], config
    (clamped, config), (exact, _) = build(False), build(True)
    rng = np.random.default_rng(0)
    panels = pack_b_panels(rng.standard_normal((1, K, N), dtype=np.float32), config, target)
    for m in (7, 21, 64, 128, 190):
        A, C = rng.standard_normal((1, m, K), dtype=np.float32), np.zeros((1, m, N), np.float32)
        t = _turns({"clamped": lambda: clamped(A, panels, C), "exact": lambda: exact(A, panels, C)}, 10, 50)
        print(f"rows {m:4d}  clamped {t['clamped'] * 1e3:8.1f} us  exact {t['exact'] * 1e3:8.1f} us  "
              f"exact/clamped {t['exact'] / t['clamped']:.3f}", flush=True)


def model(shapes: list[tuple[int, int]]) -> None:
    import torch
    import taskloom
    import taskloom.compiler.drivers as drivers
    from taskloom.bench.zoo import build, inputs
    torch.set_num_threads(2)
    net, example = build("bert", 1, 7)
    dynamic = {0: {0: ("batch", 1, 8), 1: ("seq", 2, 512)}}
    graphs = {}
    for name, few in (("clamped", 0), ("exact", drivers.FEW_ROWS_TILES)):
        drivers.FEW_ROWS_TILES, keep = few, drivers.FEW_ROWS_TILES
        graphs[name] = taskloom.compile(net, example, dynamic=dynamic)
        drivers.FEW_ROWS_TILES = keep
    for b, s in shapes:
        xs = [a.numpy() for a in inputs("bert", b, s)]
        static = taskloom.compile(net, tuple(torch.from_numpy(x) for x in xs))
        start = time.perf_counter()
        static(*xs)
        repeats = max(2, int(0.6 / (time.perf_counter() - start)))
        t = _turns({**{k: (lambda g=g: g(*xs)) for k, g in graphs.items()}, "static": lambda: static(*xs)}, 6, repeats)
        print(f"batch {b} seq {s:3d}  " + "  ".join(f"{k} {v:8.2f}" for k, v in t.items()) +
              f"  clamped/static {t['clamped'] / t['static']:.3f}  exact/static {t['exact'] / t['static']:.3f}",
              flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["kernel"]:
        kernel(int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1:2] == ["model"]:
        model([tuple(int(v) for v in a.split(",")) for a in sys.argv[2:]])  # type: ignore[misc]
    else:
        sys.exit(__doc__)
