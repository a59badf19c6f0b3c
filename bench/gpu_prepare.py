"""Builds, into a cache folder, the CUDA libraries a GPU session will build (its models and
matmuls compiled for that GPU), so that a lent GPU's minutes go to running them: run here
with the GPU's description, carry the folder, and point TASKLOOM_CACHE_DIR at it there.
The code of a build depends on the target's numbers, so a GPU that reads differently from
``--gpu`` builds afresh; nothing is wrong then, only slower.

    TASKLOOM_CACHE_DIR=.gpucache python3 bench/gpu_prepare.py --gpu "NVIDIA H100 80GB HBM3" \
        [--dram-gbs N] [--split-k] [--pdl] [--stores] [--float32] [--matmuls] [--tuning] [--dynamic] [--check-models] bert resnet50
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch

from gpu_session import _first  # the session's models give their first output
from taskloom.bench.zoo import build
from taskloom.frontend.torch import Backend
from taskloom.target import CudaTarget
from taskloom.tune.records import Records


class _Built(Exception):
    """Raised in place of running the compiled program: only its build was wanted."""


def prepare(name: str, target: CudaTarget, dtype: torch.dtype = torch.float16, seq: int = 128) -> float:
    """Compiles model ``name`` as the session's torch.compile would on the GPU; the seconds it took."""
    model, inputs = build(name, batch=1, seq=seq)
    model = model.to(dtype).eval()
    inputs = tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)
    return _compile(lambda *xs: _first(model(*xs)), inputs, target)


def prepare_matmuls(target: CudaTarget) -> float:
    """The session's smaller matmuls (bench/gpu_session.py, through torch.compile) and Nsight
    Compute's products (bench/gpu_ncu_matmul.py); the seconds they took. The large ones are
    left to the GPU: torch's lowering runs a product once, which for 4096³ float16 on a CPU
    takes minutes."""
    from gpu_ncu_matmul import compile_products
    from gpu_session import MATMULS
    seconds = 0.0
    for m, n, k in (s for s in MATMULS if s[0] * s[1] * s[2] < 2 ** 30):
        seconds += _compile(lambda x, y: x @ y, (torch.randn(m, k).half(), torch.randn(k, n).half()), target)
    started = time.perf_counter()
    compile_products(target, "emulator")
    return seconds + time.perf_counter() - started


def prepare_tuning(target: CudaTarget) -> float:
    """The libraries the session's tune stage times (every config of the space for each of
    its products and convolutions, bench/gpu_session.py TUNED and TUNED_CONVS), built without
    timing anything; the seconds."""
    import tempfile
    from unittest import mock

    import taskloom
    from taskloom.backend.build import build_cuda_library
    from gpu_session import TUNED, TUNED_CONVS, conv_graph, product_graph

    def build_only(fns, tgt):
        build_cuda_library(list(fns), tgt, name="tune")
        return [1.0] * len(fns)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch, \
            mock.patch("taskloom.tune.cuda.time_on_gpu", build_only), \
            mock.patch("taskloom.compiler.drivers._gpu_runs", lambda target: True), \
            mock.patch("taskloom.tune.records.Records.default", lambda: Records(Path(scratch) / "t.sqlite")):
        for graph in [product_graph(*mnk) for mnk in TUNED] + [conv_graph(*cs) for cs in TUNED_CONVS]:
            taskloom.compile(graph, target=target, tune=2, device="emulator")
    return time.perf_counter() - started


def prepare_dynamic(target: CudaTarget) -> float:
    """The dynamic stage's BERT builds (bench/gpu_session.py DYNAMIC_SHAPES): compiled once
    with ``dynamic=True`` (the sequence symbolic at batch 1, then batch and sequence), and
    once per shape; the seconds they took."""
    from gpu_session import DYNAMIC_SHAPES
    model = build("bert", batch=1, seq=16)[0].half().eval()
    seconds = 0.0
    for index, (batch, seq) in enumerate(DYNAMIC_SHAPES):
        inputs = build("bert", batch=batch, seq=seq)[1]
        if index == 0 or batch > 1:  # the calls on which the session's dynamic compile recompiles
            seconds += compile_only(lambda *xs: _first(model(*xs)), inputs, target, dynamic=True)[0]
        seconds += _compile(lambda *xs: _first(model(*xs)), inputs, target)
    return seconds


def prepare_check_models(target: CudaTarget) -> float:
    """The check_models stage's builds (bench/gpu_session.py CHECKED_MODELS), with wgmma and
    without; the seconds they took."""
    import os
    from gpu_session import CHECKED_MODELS, checked_model
    seconds = 0.0
    for family, layers, hidden, heads, seq, _ in CHECKED_MODELS:
        fn, _ = checked_model(family, layers, hidden, heads)
        ids = torch.randint(0, 30522, (1, seq), generator=torch.Generator().manual_seed(0))
        for wgmma in ("1", "0"):
            os.environ["TASKLOOM_WGMMA"] = wgmma
            seconds += _compile(fn, (ids,), target)
    os.environ.pop("TASKLOOM_WGMMA")
    return seconds


def prepare_with(variable: str, value: str, names: tuple[str, ...], target: CudaTarget) -> float:
    """Models ``names`` built with environment ``variable`` at ``value`` (the split_k and pdl
    stages' second setting; the first is the models stage's build). The seconds they took."""
    import os
    os.environ[variable] = value
    try:
        return sum(prepare(name, target) for name in names)
    finally:
        os.environ.pop(variable)


def _compile(model, inputs, target: CudaTarget) -> float:
    return compile_only(model, inputs, target)[0]


def compile_only(model, inputs, target: CudaTarget, dynamic: bool = False) -> tuple[float, Backend]:
    """Compiles ``model`` for ``target`` as torch.compile would on its first call, running
    nothing: the seconds it took, and the backend (its ``compiled`` functions)."""
    backend = Backend(target=target, device="emulator")

    def build_only(gm, example_inputs):
        backend(gm, example_inputs)

        def stop(*args):
            raise _Built
        return stop
    torch._dynamo.reset()
    started = time.perf_counter()
    try:
        with torch.inference_mode():
            torch.compile(model, backend=build_only, dynamic=dynamic)(*inputs)
    except _Built:
        pass
    return time.perf_counter() - started, backend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--matmuls", action="store_true", help="also the session's matmuls")
    parser.add_argument("--tuning", action="store_true", help="also the libraries its tune stage times")
    parser.add_argument("--dynamic", action="store_true", help="also its dynamic stage's BERT builds")
    parser.add_argument("--check-models", action="store_true", help="also its check_models stage's builds")
    parser.add_argument("--split-k", action="store_true", help="also its split_k stage's model builds")
    parser.add_argument("--pdl", action="store_true", help="also its pdl stage's model builds")
    parser.add_argument("--stores", action="store_true", help="also its stores stage's model builds")
    parser.add_argument("--float32", action="store_true", help="also the models in float32 (its fp32 step)")
    parser.add_argument("--gpu", default="NVIDIA H100 80GB HBM3", help="the name the GPU's driver reports")
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--dram-gbs", type=int, default=0,
                        help="the GPU's DRAM bandwidth as taskloom reads it (default: the arch's preset); "
                             "the GPU matmul model's picks depend on it, e.g. 4916 for an H200")
    args = parser.parse_args()
    target = dataclasses.replace(CudaTarget.from_arch(args.arch), name=args.gpu)
    if args.dram_gbs:
        target = dataclasses.replace(target, dram_gbs=args.dram_gbs)
    if args.matmuls:
        print(f"matmuls: built in {prepare_matmuls(target):.1f} s", flush=True)
    if args.tuning:
        print(f"tuning: built in {prepare_tuning(target):.1f} s", flush=True)
    if args.check_models:
        print(f"check_models: built in {prepare_check_models(target):.1f} s", flush=True)
    if args.dynamic:
        print(f"dynamic: built in {prepare_dynamic(target):.1f} s", flush=True)
    from gpu_session import PDL_MODELS, SPLIT_MODELS, STORE_MODELS, WINDOW_MODELS
    if args.split_k:
        print(f"split_k: built in {prepare_with('TASKLOOM_SPLIT_K', 'auto', SPLIT_MODELS, target):.1f} s", flush=True)
    if args.pdl:
        print(f"pdl: built in {prepare_with('TASKLOOM_PDL', '1', PDL_MODELS, target):.1f} s", flush=True)
    if args.stores:  # (the stage's other setting is the models stage's build)
        seconds = (prepare_with("TASKLOOM_STAGE_C", "0", STORE_MODELS, target)
                   + prepare_with("TASKLOOM_WINDOW", "0", WINDOW_MODELS, target))
        print(f"stores: built in {seconds:.1f} s", flush=True)
    for name in args.models:
        print(f"{name}: built in {prepare(name, target):.1f} s", flush=True)
        if args.float32:
            print(f"{name} float32: built in {prepare(name, target, torch.float32):.1f} s", flush=True)


if __name__ == "__main__":
    main()
