"""Where a matmul kernel's time goes, core by core: the template's kernel for one config,
its generated C instrumented with the time-stamp counter around the phases the template
names in comments (packing B, packing A, each K block), then timed.

    python bench/matmul_phases.py 512,512,512 6,4,144,906,1024,2,1

Prints, for each core, the microseconds a call spends packing B, packing A, in each K
block (its packing included) and in all, and the call's own time. The counters cost a few
instructions a phase and a K block, none in the micro-kernel's loop. The counter runs at a constant rate (``constant_tsc``), measured here against
the wall clock.
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time

import numpy as np

from taskloom.backend.codegen_x86 import codegen_x86 as codegen_c
from taskloom.backend.compiler import compile_shared_library
from taskloom.ir import stmt as S
from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program
from taskloom.target.cpu import CpuTarget
from taskloom import transforms

#: the phases, by the comment the template emits at the head of each one's loop
PHASES = {"pack B": "// pack B's", "pack A": "// pack A's"}
MAX_BLOCKS = 8  # K blocks timed one by one; later ones add to the last

SLOTS = len(PHASES) + MAX_BLOCKS + 2  # the phases, the K blocks, the whole call, the calls counted
ROW = 16  # a thread's counters: two 64-byte lines of their own, so no two threads share one

COUNTERS = f"""
#include <x86intrin.h>
static unsigned long long tl_ph[64][{ROW}] __attribute__((aligned(64)));
void tl_phases_get(unsigned long long* out) {{ __builtin_memcpy(out, tl_ph, sizeof tl_ph); }}
void tl_phases_reset(void) {{ __builtin_memset(tl_ph, 0, sizeof tl_ph); }}
unsigned long long tl_rdtsc(void) {{ return __rdtsc(); }}
"""


def _block_end(lines: list[str], start: int) -> int:
    """The line that closes the brace opened on line ``start``."""
    depth = 0
    for i in range(start, len(lines)):
        depth += lines[i].count("{") - lines[i].count("}")
        if depth == 0 and i > start or depth < 0:
            return i
    raise ValueError(f"no closing brace for line {start}: {lines[start]!r}")


def instrument(source: str, kernel: str) -> str:
    """``source`` with time-stamp counters around the template's phases in ``kernel``."""
    lines = source.split("\n")
    head = next(i for i, l in enumerate(lines) if l.startswith(f"void {kernel}("))
    body_end = _block_end(lines, head)
    # the thread's body: the parallel loop over cores, or the function itself on one core
    par = next((i for i in range(head, body_end) if "for (int32_t w = 0;" in lines[i]), head)
    tid = "omp_get_thread_num()" if par != head else "0"
    # (line, rank, text): inserted before ``line``, lower ranks first where lines coincide
    # (a phase's end before the next one's start, a K block's start before a phase's)
    inserts: list[tuple[int, int, str]] = [
        (par + 1, 1, "unsigned long long tl_t_all = __rdtsc();"),
        (_block_end(lines, par), 0, f"tl_ph[{tid}][{SLOTS - 2}] += __rdtsc() - tl_t_all; tl_ph[{tid}][{SLOTS - 1}] += 1;")]
    kb = next((i for i in range(par, body_end) if "for (int32_t kb = 0;" in lines[i]), None)
    if kb is not None:
        inserts += [(kb + 1, 2, "unsigned long long tl_t_kb = __rdtsc();"),
                    (_block_end(lines, kb), 0, f"tl_ph[{tid}][{len(PHASES)} + (kb < {MAX_BLOCKS} ? kb : {MAX_BLOCKS - 1})] "
                                            f"+= __rdtsc() - tl_t_kb;")]
    for slot, mark in enumerate(PHASES.values()):
        for i in range(par, body_end):
            if lines[i].strip().startswith(mark):
                inserts += [(i, 3, "{ unsigned long long tl_t_ph = __rdtsc();"),
                            (_block_end(lines, i + 1) + 1, 0, f"tl_ph[{tid}][{slot}] += __rdtsc() - tl_t_ph; }}")]
    for at, _, text in sorted(inserts, key=lambda x: (-x[0], -x[1])):
        lines.insert(at, text)
    return COUNTERS + "\n".join(lines)


def tsc_per_us(lib: ctypes.CDLL) -> float:
    lib.tl_rdtsc.restype = ctypes.c_ulonglong
    t0, c0 = time.perf_counter(), lib.tl_rdtsc()
    time.sleep(0.2)
    return (lib.tl_rdtsc() - c0) / (time.perf_counter() - t0) / 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shape", help="M,N,K")
    p.add_argument("config", help="mr,nv,kc,mc,nc,pm,pn")
    p.add_argument("--calls", type=int, default=200, help="calls per round")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    target = CpuTarget.host()
    M, N, K = (int(v) for v in args.shape.split(","))
    config = MatmulConfig(*(int(v) for v in args.config.split(",")))
    fn = matmul_program((1, M, N, K), config, target)
    source = instrument(codegen_c(S.Module((transforms.lower(fn),)), target), fn.name)
    lib = ctypes.CDLL(str(compile_shared_library(source, target, name="matmul_phases")))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((M, K), np.float32), rng.standard_normal((K, N), np.float32)
    c = np.zeros((M, N), np.float32)
    run = lib.matmul
    run.argtypes = [ctypes.c_void_p] * 3
    ptrs = (a.ctypes.data, b.ctypes.data, c.ctypes.data)
    run(*ptrs)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    rate = tsc_per_us(lib)
    counts = (ctypes.c_ulonglong * (64 * ROW))()
    per_round, calls_us = [], []
    for _ in range(args.rounds):
        for _ in range(10):
            run(*ptrs)
        lib.tl_phases_reset()
        t = time.perf_counter()
        for _ in range(args.calls):
            run(*ptrs)
        calls_us.append((time.perf_counter() - t) / args.calls * 1e6)
        lib.tl_phases_get(counts)
        per_round.append(np.array(counts, dtype=np.float64).reshape(64, ROW)[:, :SLOTS])
    med = np.median(np.stack(per_round), axis=0)
    cores = [w for w in range(64) if med[w, -1] > 0]
    print(f"{M}x{N}x{K}, {fn.attr('config')}; median of {args.rounds} rounds of {args.calls} calls, microseconds a call")
    blocks = [j for j in range(MAX_BLOCKS) if med[cores[0], len(PHASES) + j] > 0]
    cols = [(name, j) for j, name in enumerate(PHASES)] + \
        [(f"K block {j}", len(PHASES) + j) for j in blocks] + [("all", SLOTS - 2)]
    print("| core | " + " | ".join(name for name, _ in cols) + " |\n" + "|---" * (1 + len(cols)) + "|")
    for w in cores:
        us = med[w] / med[w, -1] / rate
        print(f"| {w} | " + " | ".join(f"{us[j]:.1f}" for _, j in cols) + " |")
    call = statistics.median(calls_us)
    print(f"call: {call:.1f} us ({2 * M * N * K / call / 1e3:.1f} GFLOP/s, instrumented)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
