"""Whole models compiled two ways in one process and timed in alternating rounds, so that
drift hits both. ``--switch`` picks what differs:

- ``prefetch``: every kernel told the weights do not stream (no panels prefetched), then
  that they do, whatever the graph's size says;
- ``a-in-place``: the matmul template told every A must be packed, then the real distance
  between A's rows, which lets it read a plain A in place;
- ``k-block``: K cut into blocks of the config's ``kc`` and a short remainder, then into
  as many blocks made as equal as whole vectors allow (``matmul_cpu.k_block``);
- ``attention``: the CPU attention template withdrawn (the chain of matmuls and a softmax,
  the scores stored), then offered (attention in one kernel);
- ``merge-products``: an attention's query, key and value projections three products,
  then one (``compiler.passes.sibling_products``);
- ``streamed-b``: the analytic model told a weight comes from wherever it fits, then that
  a graph whose weights stream reads each from memory (``Tunable.b_streams``).

    python bench/model_ab.py --switch prefetch resnet50 bert --rounds 10
    python bench/model_ab.py --switch k-block matmul:512,512,512 --rounds 15
    python bench/model_ab.py --switch attention bert gpt2 --seq 384
    python bench/model_ab.py --switch merge-products bert --seq 7
    python bench/model_ab.py --switch streamed-b bert --batch 4 --seq 7

A model is a name of ``taskloom bench model``'s zoo, or ``matmul:M,N,K`` for one product.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any
from unittest import mock

import numpy as np

import taskloom
from taskloom.bench import zoo
from taskloom.bench.op import MatmulProblem
from taskloom.bench.peers import first_output
from taskloom.bench.timing import machine, medians, time_rounds
from taskloom.ir.index import round_up
from taskloom.compiler import drivers
from taskloom.schedule import contraction, cpu, registry
from taskloom.schedule.templates import matmul_cpu


def _prefetch(on: bool) -> Any:
    forced = lambda *a, **k: drivers.schedule_kernel(*a, **{**k, "weights_stream": on})  # noqa: E731
    return mock.patch("taskloom.compiler.graph_compiler.schedule_kernel", forced)


def _a_in_place(on: bool) -> Any:
    real = contraction.a_row_stride
    return mock.patch("taskloom.schedule.cpu.a_row_stride", real if on else (lambda con, a_kind: 0))


def _k_block(on: bool) -> Any:
    real = matmul_cpu.k_block
    return mock.patch.object(matmul_cpu, "k_block", real if on else (lambda K, kc, lanes: min(round_up(kc, lanes), K)))


def _attention(on: bool) -> Any:
    kept = [(n, f) for n, f in registry.templates_for("cpu") if on or n != "attention_cpu"]
    return mock.patch.dict(registry._TEMPLATES, {"cpu": kept})


def _streamed_b(on: bool) -> Any:
    real = cpu.tunable

    def tunable(*args: Any, **kwargs: Any) -> Any:
        t = real(*args, **kwargs)
        return t if on else dataclasses.replace(t, b_streams=False)
    return mock.patch("taskloom.schedule.cpu.tunable", tunable)


def _merge_products(on: bool) -> Any:
    return mock.patch.dict("os.environ", {"TASKLOOM_MERGE_PRODUCTS": "1" if on else "0"})


#: switch -> (patch for off or on, the two columns' names)
SWITCHES = {"prefetch": (_prefetch, ("not prefetched", "prefetched")),
            "a-in-place": (_a_in_place, ("A packed", "A in place")),
            "k-block": (_k_block, ("K blocks of kc", "K blocks evened out")),
            "attention": (_attention, ("attention unfused", "attention fused")),
            "merge-products": (_merge_products, ("three projections", "one product")),
            "streamed-b": (_streamed_b, ("weights priced from L3", "streamed weights from memory"))}


def _subject(name: str, args: argparse.Namespace) -> tuple[tuple[Any, ...], list[np.ndarray]]:
    """What ``taskloom.compile`` takes for ``name`` and the arrays to call the result on: a
    zoo model with its example inputs, or for ``matmul:M,N,K`` the graph and inputs of
    ``taskloom bench op matmul``."""
    if name.startswith("matmul:"):
        shape = tuple(int(x) for x in name.split(":", 1)[1].split(","))
        problem = MatmulProblem(shape, argparse.Namespace(batch=None))
        return (problem.trace(),), problem.taskloom_inputs()
    model, inputs = zoo.build(name, args.batch, args.seq, 0)
    return (model, tuple(inputs)), [x.numpy() for x in inputs]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--switch", choices=sorted(SWITCHES), required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args(argv)
    patch, (off_name, on_name) = SWITCHES[args.switch]
    print(f"machine: {machine()}")
    print(f"| model | weights (MiB) | {off_name} ms | {on_name} ms | speed-up |\n|---|---|---|---|---|")
    for name in args.models:
        subject, data = _subject(name, args)
        compiled = []
        for on in (False, True):
            with patch(on):
                compiled.append(taskloom.compile(*subject))
        off, on_ = compiled
        np.testing.assert_allclose(first_output(off(*data)), first_output(on_(*data)), rtol=1e-4, atol=1e-4)
        times = time_rounds({"off": lambda: off(*data), "on": lambda: on_(*data)}, repeats=10, rounds=args.rounds)
        med = medians(times)
        mib = sum(c.nbytes for c in on_.constants) / 2 ** 20
        print(f"| {name} | {mib:.0f} | {med['off']:.2f} | {med['on']:.2f} | {med['off'] / med['on']:.3f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
