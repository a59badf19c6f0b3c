"""Wav2Vec2's positional convolution (Conv1d 256 -> 256, kernel 128, padding 64, groups 16)
on a sequence of ``--length`` frames: taskloom's compiled layer against eager PyTorch,
timed in alternating rounds on the CPU's cores.

    .venv/bin/python bench/grouped_conv.py [--length 200] [--rounds 5]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import taskloom


def median_ms(fn, repeats: int = 20) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(256, 256, 128, padding=64, groups=16).eval()
    x = torch.randn(1, 256, args.length)
    compiled = taskloom.compile(conv, (x,))
    with torch.no_grad():
        diff = float((compiled(x) - conv(x)).abs().max())
    print(f"kernels: {[k['schedule'] for k in compiled.meta['kernels']]}; max abs diff {diff:.1e}")
    print("| round | torch ms | taskloom ms | taskloom / torch |\n|---|---|---|---|")
    ratios = []
    for r in range(args.rounds):
        with torch.inference_mode():
            eager = median_ms(lambda: conv(x))
        ours = median_ms(lambda: compiled(x))
        ratios.append(ours / eager)
        print(f"| {r + 1} | {eager:.2f} | {ours:.2f} | {ours / eager:.2f} |")
    print(f"median ratio {statistics.median(ratios):.2f} (torch {torch.__version__}, {torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
