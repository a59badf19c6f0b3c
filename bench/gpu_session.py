"""One GPU session's measurements in one process, each result written as it lands (a session
cut short keeps what it finished): the bar matmuls against cuBLAS, the benchmark models in
float16 at batch 1 against torch eager, torch.compile and torch.compile with CUDA graphs
(:mod:`taskloom.bench.gpu`), and, per model, the kernels taskloom's program spends its time
in (torch.profiler) beside the host's time per call, the bar products tuned on the GPU
against the analytic model's configs, BERT's linears split along K, and BERT over several
shapes compiled once with symbolic sizes against a compile per shape and the peers.

    python3 bench/gpu_session.py --out DIR [--stages wgmma_smoke|check_models,matmul,mma_sync,models,tune,split_k,pdl,dynamic]
        [--models bert,resnet50] [--systems taskloom,torch,inductor,cudagraphs]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from taskloom.bench.gpu import SYSTEMS, bench_matmul, bench_model, format_rows, gpu_facts

#: (M, N, K): issue 29's bar shapes; the last four are BERT-base's linears at sequence 128
MATMULS = [(4096, 4096, 4096), (2048, 2048, 2048), (2039, 2039, 2039),
           (128, 768, 768), (128, 2304, 768), (128, 3072, 768), (128, 768, 3072)]
MODELS = ("bert", "resnet50", "gpt2", "mobilenet_v2", "inception_v3")


def _save(path: Path, record: Any) -> None:
    path.write_text(json.dumps(record, indent=1, default=str))


def matmuls(out: Path, repeats: int, rounds: int) -> None:
    """float16 bar shapes against cuBLAS, then 4096³ float32 with tf32 on both sides."""
    results: list[Any] = []
    for m, n, k in MATMULS:
        results.append(_guarded(lambda: bench_matmul(m, k, n, "float16", repeats, rounds, ("taskloom", "torch"))))
        _show(f"matmul {m}x{n}x{k} float16", results[-1])
        results[-1]["profile"] = _guarded(lambda: profile_matmul(m, n, k))
        print(results[-1]["profile"].get("table", results[-1]["profile"]), flush=True)
        _save(out / "matmul.json", results)
    if os.environ.get("TASKLOOM_WGMMA") == "0":
        return  # the wgmma check failed: the tf32 product below would run without it as well
    torch.set_float32_matmul_precision("high")
    try:
        results.append(_guarded(lambda: bench_matmul(4096, 4096, 4096, "float32", repeats, rounds,
                                                     ("taskloom", "torch"))))
        _show("matmul 4096^3 float32 as tf32", results[-1])
    finally:
        torch.set_float32_matmul_precision("highest")
    _save(out / "matmul.json", results)


def mma_sync_matmuls(out: Path, repeats: int, rounds: int) -> None:
    """The float16 bar shapes by taskloom with wgmma turned off (``mma.sync`` only): what
    the Hopper template is worth, shape by shape, beside the matmul stage's rows."""
    os.environ["TASKLOOM_WGMMA"] = "0"
    results = []
    for m, n, k in MATMULS:
        results.append(_guarded(lambda: bench_matmul(m, k, n, "float16", repeats, rounds, ("taskloom",))))
        _show(f"matmul {m}x{n}x{k} float16, mma.sync only", results[-1])
        _save(out / "matmul_mma_sync.json", results)


def wgmma_smoke(target: str = "cuda", device: str = "cuda") -> int:
    """0 where the wgmma template computes right on this GPU (a float16 product and a linear
    at odd sizes, compiled as a model would be, against torch), else 1: the session then
    turns wgmma off for its later stages."""
    import taskloom
    from taskloom import ops
    from taskloom.graph import Graph, input
    a, b = input((1000, 776), "float16", name="a"), input((776, 1032), "float16", name="b")
    w = input((520, 776), "float16", name="w")
    compiled = taskloom.compile(Graph([a, b, w], [ops.matmul(a, b), ops.linear(a, w)]), target=target, device=device)
    used = [k["schedule"] for k in compiled.meta["kernels"] if "wgmma" in k["schedule"]]
    where = "cuda" if device == "cuda" else "cpu"
    x, y, z = (torch.randn(*s, device=where, dtype=torch.float16) for s in ((1000, 776), (776, 1032), (520, 776)))
    got = compiled(x, y, z)
    want = (x.float() @ y.float(), x.float() @ z.float().T)
    errors = [float((g.float() - r).abs().max()) for g, r in zip(got, want)]
    print(f"wgmma kernels: {used}; largest errors {errors}", flush=True)
    return 0 if used and max(errors) < 0.5 else 1


#: The transformers check_models runs (family, layers, hidden, heads, sequence, emulated):
#: BERT-base of 12 and 1 layers, GPT-2 small, and small ones of each whose every kernel the
#: emulator also runs from the GPU's inputs
CHECKED_MODELS = (("bert", 12, 768, 12, 128, False), ("bert", 1, 768, 12, 128, False), ("bert", 2, 256, 4, 64, True),
                  ("gpt2", 12, 768, 12, 128, False), ("gpt2", 2, 256, 4, 64, True))


def checked_model(family: str, layers: int, hidden: int, heads: int) -> Any:
    """A float16 BERT or GPT-2 of ``layers`` (random weights, seeded), called with token ids:
    the function giving its last hidden state, and the module."""
    import transformers
    torch.manual_seed(0)
    if family == "bert":
        config = transformers.BertConfig(attn_implementation="eager", num_hidden_layers=layers, hidden_size=hidden,
                                         num_attention_heads=heads, intermediate_size=4 * hidden)
        model = transformers.BertModel(config, add_pooling_layer=False)
    else:
        config = transformers.GPT2Config(attn_implementation="eager", n_layer=layers, n_embd=hidden, n_head=heads)
        model = transformers.GPT2Model(config)
    model = model.half().eval()
    return lambda ids: model(input_ids=ids).last_hidden_state, model


def check_models(out: Path, device: str = "cuda", checked: Any = CHECKED_MODELS) -> None:
    """BERT and GPT-2 in float16 (:data:`CHECKED_MODELS`) against eager torch, with wgmma and
    without, then each of their kernels by itself (:mod:`taskloom.runtime.cuda_check`): which
    kernel leaves memory unwritten, computes differently twice, or (the small ones) differs
    from the emulator on this GPU (``device="cpu"``: a dry run of the stage, in the emulator)."""
    from taskloom.bench.gpu import _taskloom_backend
    from taskloom.frontend.torch import Backend
    from taskloom.runtime.cuda_check import check_kernels, format_checks
    found: dict[str, Any] = {}
    for family, layers, hidden, heads, seq, emulate in checked:
        fn, model = checked_model(family, layers, hidden, heads)
        model.to(device)
        ids = torch.randint(0, 30522, (1, seq), generator=torch.Generator().manual_seed(0)).to(device)
        with torch.inference_mode():
            want = fn(ids).float()
            for wgmma in ("1", "0"):
                os.environ["TASKLOOM_WGMMA"] = wgmma
                torch._dynamo.reset()
                backend = _taskloom_backend() if device == "cuda" else \
                    Backend(target="cuda:sm_90a", device="emulator", fallback=False)
                key = f"{family} {layers} layers, hidden {hidden}, sequence {seq}, wgmma {'on' if wgmma == '1' else 'off'}"
                try:
                    got = torch.compile(fn, backend=backend)(ids).float()
                    diff = float((got - want).abs().max() / want.abs().max())
                    graph = backend.compiled[0].compiled_graph
                    table = format_checks(check_kernels(graph, ids, emulate=emulate))
                    again = float((graph(ids).float() - want).abs().max() / want.abs().max())
                    found[key] = {"max_rel_diff": diff, "max_rel_diff_after_checks": again, "kernels": table}
                    print(f"{key}: max relative difference {diff:.3g} (then {again:.3g})\n{table}", flush=True)
                except Exception as exc:  # one failure must not lose the others
                    found[key] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
                    print(f"{key}: {found[key]['traceback']}", flush=True)
                _save(out / "check_models.json", found)
    os.environ.pop("TASKLOOM_WGMMA", None)


def models(out: Path, names: list[str], repeats: int, rounds: int, systems: Any = SYSTEMS,
           dtype: str = "float16") -> None:
    """Each model against the peers, then (in float16) a profile of taskloom's program;
    into models.json (float32: models_float32.json)."""
    results: list[Any] = []
    for name in names:
        record = _guarded(lambda: bench_model(name, 1, 128, dtype, repeats, rounds, systems))
        _show(f"{name} {dtype} batch 1", record)
        if dtype == "float16":
            record["profile"] = _guarded(lambda: profile_model(name))
            print(record["profile"].get("table", record["profile"]), flush=True)
        results.append(record)
        _save(out / ("models.json" if dtype == "float16" else f"models_{dtype}.json"), results)


def profile_matmul(m: int, n: int, k: int) -> dict[str, Any]:
    """:func:`profile` of taskloom's float16 ``A[m, k] @ B[k, n]`` (its pads, its product)."""
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    return profile(f"matmul {m}x{n}x{k}", lambda x, y: x @ y, (a, b))


def profile_model(name: str) -> dict[str, Any]:
    """:func:`profile` of taskloom's compiled model ``name`` in float16 at batch 1."""
    from taskloom.bench.zoo import build
    model, inputs = build(name, batch=1, seq=128)
    model = model.to(device="cuda", dtype=torch.float16).eval()
    inputs = tuple(x.to("cuda", torch.float16) if x.is_floating_point() else x.to("cuda") for x in inputs)
    return profile(name, model, inputs)


def split_linears(out: Path, repeats: int, rounds: int) -> None:
    """BERT-base's linears (float16, 128 rows, a bias) whole and split along K into 2, 4 and
    8 parts, and as the model picks (``TASKLOOM_SPLIT_K``): what the split is worth."""
    from taskloom.bench.gpu import time_cuda_rounds
    from taskloom.bench.gpu import _taskloom_backend
    results = []
    for m, n, k in MATMULS[3:]:
        layer = torch.nn.Linear(k, n).to("cuda", torch.float16).eval()
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)
        calls = {}
        for setting in ("0", "2", "4", "8", "auto"):
            os.environ["TASKLOOM_SPLIT_K"] = setting
            torch._dynamo.reset()
            compiled = torch.compile(layer, backend=_taskloom_backend())
            with torch.inference_mode():
                compiled(x)
            calls[f"split {setting}"] = (lambda c: lambda: c(x))(compiled)
        os.environ.pop("TASKLOOM_SPLIT_K")
        with torch.inference_mode():
            times = time_cuda_rounds(calls, repeats, rounds)
        row = {name: (None if isinstance(t, Exception) else statistics.median(v for b in t for v in b))
               for name, t in times.items()}
        results.append({"M": m, "N": n, "K": k, "median_ms": row})
        print(f"linear {m}x{n}x{k}: " + ", ".join(f"{name} {ms:.4f} ms" if ms else f"{name} failed"
                                                   for name, ms in row.items()), flush=True)
        _save(out / "split_k.json", results)
    for name in SPLIT_MODELS:  # whole models, the split as the model picks it against none
        results.append(_guarded(lambda: model_ab(name, "TASKLOOM_SPLIT_K", ("0", "auto"), repeats, rounds)))
        print(f"{name}: {results[-1]}", flush=True)
        _save(out / "split_k.json", results)


#: the models the split_k stage times with TASKLOOM_SPLIT_K=auto against none: ResNet-50's
#: 3x3 convolutions at 14x14 and 7x7 give 16 and 8 blocks for 132 SMs whole
SPLIT_MODELS = ("resnet50", "bert")


#: the models the pdl stage times with kernels launched as programmatic dependents and not
PDL_MODELS = ("mobilenet_v2", "gpt2", "bert", "resnet50")


def dependent_launches(out: Path, repeats: int, rounds: int) -> None:
    """:data:`PDL_MODELS` with ``TASKLOOM_PDL=1`` against ``0``: what overlapping each
    launch with the kernel before is worth, model by model."""
    results = []
    for name in PDL_MODELS:
        results.append(_guarded(lambda: model_ab(name, "TASKLOOM_PDL", ("0", "1"), repeats, rounds)))
        print(f"{name}: {results[-1]}", flush=True)
        _save(out / "pdl.json", results)


#: the models the stores stage times with C staged in shared memory and not
#: (TASKLOOM_STAGE_C), and with the window kernel and not (TASKLOOM_WINDOW)
STORE_MODELS = ("resnet50", "mobilenet_v2", "bert")
WINDOW_MODELS = ("mobilenet_v2", "inception_v3")


def stores_and_windows(out: Path, repeats: int, rounds: int) -> None:
    """:data:`STORE_MODELS` with the tensor-core templates' C staged (``TASKLOOM_STAGE_C=1``)
    against stored from the fragments, and :data:`WINDOW_MODELS` with the window kernel for
    depthwise convolutions and pools (``TASKLOOM_WINDOW=1``) against a thread an element."""
    results = []
    for variable, names in (("TASKLOOM_STAGE_C", STORE_MODELS), ("TASKLOOM_WINDOW", WINDOW_MODELS)):
        for name in names:
            results.append(_guarded(lambda: model_ab(name, variable, ("0", "1"), repeats, rounds)))
            print(f"{name} {variable}: {results[-1]}", flush=True)
            _save(out / "stores.json", results)


def model_ab(name: str, variable: str, settings: tuple[str, str], repeats: int, rounds: int,
             device: str = "cuda") -> dict[str, Any]:
    """Model ``name`` in float16 at batch 1 compiled with environment ``variable`` at each of
    two ``settings``, timed in turns: median ms each, and the largest difference between
    the two results (relative to the first's largest magnitude). ``device="cpu"``: a dry run
    of the stage's logic, in float32 on the host."""
    from taskloom.bench.gpu import _taskloom_backend, time_cuda_rounds
    from taskloom.bench.timing import time_rounds
    from taskloom.bench.zoo import build
    from taskloom.frontend.torch import Backend
    on_gpu = device == "cuda"
    dtype = torch.float16 if on_gpu else torch.float32
    model, inputs = build(name, batch=1, seq=128)
    model = model.to(device, dtype).eval()
    inputs = tuple(x.to(device, dtype) if x.is_floating_point() else x.to(device) for x in inputs)
    calls, outs = {}, {}
    for setting in settings:
        os.environ[variable] = setting
        torch._dynamo.reset()
        backend = _taskloom_backend() if on_gpu else Backend(fallback=False)
        compiled = torch.compile(lambda *xs: _first(model(*xs)), backend=backend)
        with torch.inference_mode():
            outs[setting] = compiled(*inputs).float()
        calls[f"{variable}={setting}"] = (lambda c: lambda: c(*inputs))(compiled)
    os.environ.pop(variable)
    with torch.inference_mode():
        times = (time_cuda_rounds if on_gpu else time_rounds)(calls, repeats, rounds)
    first, second = (outs[x] for x in settings)
    diff = float((second - first).abs().max() / first.abs().max())
    return {"model": name, "max_rel_diff": diff,
            "median_ms": {k: None if isinstance(t, Exception) else statistics.median(v for b in t for v in b)
                          for k, t in times.items()}}


def _first(out: Any) -> Any:
    """A model's first output, as taskloom.bench.gpu's models give it."""
    return out if isinstance(out, torch.Tensor) else out[0]


#: (M, N, K) tuned on the GPU by the session's tune stage
TUNED = [(4096, 4096, 4096), (2039, 2039, 2039), (128, 3072, 768), (128, 768, 768)]


def product_graph(m: int, n: int, k: int) -> Any:
    """The float16 ``A[m, k] @ B[k, n]`` the tune stage compiles (and gpu_prepare builds)."""
    from taskloom import ops
    from taskloom.graph import Graph, input
    a, b = input((m, k), "float16", name="a"), input((k, n), "float16", name="b")
    return Graph([a, b], [ops.matmul(a, b)])


def _model_against_times(m: int, n: int, k: int) -> dict[str, Any]:
    """Each timed config of the float16 product m x n x k on this GPU beside the analytic
    model's cycles for it, and their rank correlation."""
    from taskloom.tune.cost_model import spearman
    from taskloom.schedule.cuda.mma_model import Product, config_from_dict, cycles
    from taskloom.target import CudaTarget
    from taskloom.tune.cuda import records_target
    from taskloom.tune.records import Records
    target = CudaTarget.device()
    con = Product(1, m, n, k)
    points = []
    for r in Records.default().records(target=records_target(target)):
        if r.workload.startswith(f"matmul_mma/1x{m}x{n}x{k}/") and r.seconds is not None:
            points.append({"config": r.config, "seconds": r.seconds,
                           "cycles": cycles(con, config_from_dict(r.config), target)})
    rho = spearman([p["cycles"] for p in points], [p["seconds"] for p in points])
    return {"points": points, "spearman": None if rho is None else round(rho, 3)}


#: ResNet-50's 3x3 convolutions (channels in and out, height and width), NHWC float16,
#: which the tune stage tunes after the TUNED products
TUNED_CONVS = [(64, 56), (128, 28), (256, 14), (512, 7)]


def conv_graph(channels: int, size: int) -> Any:
    """The NHWC float16 3x3 convolution (padding 1) the tune stage compiles (and gpu_prepare
    builds)."""
    import numpy as np
    import taskloom
    from taskloom import ops
    from taskloom.graph import Graph, input
    x = input((1, size, size, channels), "float16", name="x")
    w = (np.random.default_rng(0).standard_normal((3, 3, channels, channels)) * 0.05).astype(np.float16)
    return Graph([x], [ops.conv2d(x, taskloom.asarray(w), padding=1, layout="NHWC")])


def tune_products(out: Path, repeats: int, rounds: int) -> None:
    """Each TUNED product, then each TUNED_CONVS convolution, compiled at tune=0 (the
    analytic model's config), then tuned at tune=2 (every config of the space timed on this
    GPU) and timed against it; every config's time is saved, for the model to be checked
    against."""
    from taskloom.target import CudaTarget
    from taskloom.tune.cuda import records_target
    from taskloom.tune.records import Records
    results = []
    for m, n, k in TUNED:
        inputs = (torch.randn(m, k, device="cuda").half(), torch.randn(k, n, device="cuda").half())
        results.append(_tune_one(f"product {m}x{n}x{k}", product_graph(m, n, k), inputs, (m, n, k), repeats, rounds))
        _save(out / "tune.json", results)
    for c, size in TUNED_CONVS:
        inputs = (torch.randn(1, size, size, c, device="cuda").half(),)
        results.append(_tune_one(f"3x3 convolution of {c} channels at {size}x{size}", conv_graph(c, size), inputs,
                                 (size * size, c, 9 * c), repeats, rounds))
        _save(out / "tune.json", results)
    Records.default().export(out / "records.jsonl", target=records_target(CudaTarget.device()))
    _save(out / "tune.json", {"products": results})


def _tune_one(what: str, graph: Any, inputs: tuple[Any, ...], mnk: tuple[int, int, int], repeats: int,
              rounds: int) -> dict[str, Any]:
    """``graph`` (one contraction, as ``M x N x K``) at tune=0 against tune=2: the record."""
    import taskloom
    from taskloom.bench.gpu import time_cuda_rounds
    model = taskloom.compile(graph, target="cuda")
    started = time.perf_counter()
    tuned = taskloom.compile(graph, target="cuda", tune=2)
    seconds = time.perf_counter() - started
    times = time_cuda_rounds({"tune=0": lambda: model(*inputs), "tune=2": lambda: tuned(*inputs)}, repeats, rounds)
    row = {name: (None if isinstance(t, Exception) else statistics.median(v for b in t for v in b))
           for name, t in times.items()}
    m, n, k = mnk
    record = {"what": what, "M": m, "N": n, "K": k, "median_ms": row, "tune_s": seconds,
              "configs": [g["schedule"] for g in (model.meta["kernels"][-1], tuned.meta["kernels"][-1])],
              "model": _model_against_times(m, n, k)}
    print(f"{what}: tune=0 {row['tune=0']} ms ({record['configs'][0]}), tune=2 {row['tune=2']} ms "
          f"({record['configs'][1]}), tuned in {seconds:.0f} s; the model's rank correlation with the times "
          f"{record['model']['spearman']}", flush=True)
    return record


def _host_ms(compiled: Any, inputs: tuple[Any, ...], calls: int) -> float:
    """Milliseconds a call, on the host's clock, ``calls`` calls back to back."""
    for _ in range(3):
        compiled(*inputs)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        compiled(*inputs)
    torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1e3 / calls


def profile(name: str, model: Any, inputs: tuple[Any, ...], calls: int = 20) -> dict[str, Any]:
    """taskloom's compiled ``model``: host milliseconds per call (replaying a CUDA graph, and
    launching kernel by kernel), GPU kernel time per call, and the kernels that take it, from
    torch.profiler."""
    from taskloom.bench.gpu import _taskloom_backend
    one_by_one = float("nan")
    os.environ["TASKLOOM_CUDA_GRAPHS"] = "0"
    try:
        torch._dynamo.reset()
        with torch.inference_mode():
            one_by_one = _host_ms(torch.compile(model, backend=_taskloom_backend()), inputs, calls)
    finally:
        del os.environ["TASKLOOM_CUDA_GRAPHS"]
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=_taskloom_backend())
    with torch.inference_mode():
        host_ms = _host_ms(compiled, inputs, calls)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                compiled(*inputs)
            torch.cuda.synchronize()
    kernels = [(e.key, e.count // calls, e.device_time_total / calls) for e in prof.key_averages()
               if e.device_time_total > 0]
    kernels.sort(key=lambda k: -k[2])
    gpu_us = sum(k[2] for k in kernels)
    lines = [f"{name}: {host_ms:.3f} ms a call on the host clock ({one_by_one:.3f} kernel by kernel), "
             f"{gpu_us / 1e3:.3f} ms of kernels, {sum(k[1] for k in kernels)} launches"]
    lines += [f"  {us:9.1f} us {count:4d}x  {key[:100]}" for key, count, us in kernels[:15]]
    torch._dynamo.reset()
    return {"host_ms": host_ms, "host_ms_kernel_by_kernel": one_by_one, "gpu_ms": gpu_us / 1e3, "kernels": kernels,
            "table": "\n".join(lines)}


#: (batch, sequence) of the dynamic stage: dynamo specializes a size of 1, so the batch of 4
#: is the one shape whose batch is symbolic
DYNAMIC_SHAPES = ((1, 16), (1, 64), (1, 128), (1, 384), (4, 128))


def dynamic_bert(out: Path, repeats: int, rounds: int, shapes: Any = DYNAMIC_SHAPES, device: str = "cuda") -> None:
    """BERT in float16 at each of ``shapes``: taskloom compiled once with ``dynamic=True``
    against taskloom compiled per shape, torch.compile with ``dynamic=True`` and eager torch;
    per shape each system's first call (its compiles) and its time (``device="cpu"``: a dry
    run of the stage's logic, in float32 and timed on the host)."""
    from taskloom.bench.gpu import _taskloom_backend, time_cuda_rounds
    from taskloom.bench.timing import time_rounds
    from taskloom.bench.zoo import build
    on_gpu = device == "cuda"
    timer = time_cuda_rounds if on_gpu else time_rounds
    torch._dynamo.reset()
    model = build("bert", batch=1, seq=16)[0].to(device, torch.float16 if on_gpu else torch.float32).eval()

    def first(*args: Any) -> Any:
        o = model(*args)
        return o if isinstance(o, torch.Tensor) else o[0]
    systems = {"taskloom-dynamic": torch.compile(first, backend=_taskloom_backend(), dynamic=True),
               "taskloom-static": torch.compile(first, backend=_taskloom_backend(), dynamic=False),
               "inductor-dynamic": torch.compile(first, dynamic=True), "torch": first}
    results: list[dict[str, Any]] = []
    for batch, seq in shapes:
        inputs = tuple(x.to(device) for x in build("bert", batch=batch, seq=seq)[1])
        row: dict[str, Any] = {"batch": batch, "seq": seq, "first_call_s": {}, "max_rel_diff": {}, "median_ms": {}}
        with torch.inference_mode():
            want = first(*inputs).float()
            calls = {}
            for name, fn in systems.items():
                try:
                    started = time.perf_counter()
                    got = fn(*inputs).float()
                    if on_gpu:
                        torch.cuda.synchronize()
                    row["first_call_s"][name] = round(time.perf_counter() - started, 3)
                    row["max_rel_diff"][name] = float((got - want).abs().max() / want.abs().max())
                    calls[name] = (lambda f: lambda: f(*inputs))(fn)
                except Exception as exc:  # a failing system is reported; the others go on
                    row["first_call_s"][name] = f"{type(exc).__name__}: {exc}"[:300]
            times = timer(calls, repeats, rounds)
        for name, blocks in times.items():
            row["median_ms"][name] = repr(blocks) if isinstance(blocks, Exception) else \
                statistics.median(t for block in blocks for t in block)
        print(f"bert {'float16' if on_gpu else 'float32 (dry run)'} batch {batch} seq {seq}: " + ", ".join(
            f"{n} {row['median_ms'].get(n, '-') if not isinstance(row['median_ms'].get(n), float) else round(row['median_ms'][n], 3)} ms "
            f"(first call {row['first_call_s'].get(n)} s)" for n in systems), flush=True)
        results.append(row)
        _save(out / "dynamic.json", {"shapes": results, "gpu": gpu_facts() if on_gpu else None})


def _guarded(fn: Any) -> Any:
    try:
        return fn()
    except Exception as exc:  # one failure must not lose the session's other results
        return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


def _show(title: str, record: dict[str, Any]) -> None:
    if "rows" in record:
        print(format_rows(title, record["rows"]), flush=True)
    else:
        print(f"{title}: {record.get('traceback', record)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stages", default="matmul,models")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="the models stage's systems")
    parser.add_argument("--dtype", default="float16", help="the models stage's (float16 or float32)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    _save(args.out / "gpu.json", {**gpu_facts(), "torch": torch.__version__})
    stages = args.stages.split(",")
    if "wgmma_smoke" in stages:
        raise SystemExit(wgmma_smoke())
    if "check_models" in stages:
        check_models(args.out)
    if "matmul" in stages:
        matmuls(args.out, args.repeats, args.rounds)
    if "mma_sync" in stages:
        mma_sync_matmuls(args.out, args.repeats, args.rounds)
    if "models" in stages:
        models(args.out, args.models.split(","), args.repeats, args.rounds, args.systems.split(","), args.dtype)
    if "tune" in stages:
        tune_products(args.out, args.repeats, args.rounds)
    if "split_k" in stages:
        split_linears(args.out, args.repeats, args.rounds)
    if "pdl" in stages:
        dependent_launches(args.out, args.repeats, args.rounds)
    if "stores" in stages:
        stores_and_windows(args.out, args.repeats, args.rounds)
    if "dynamic" in stages:
        dynamic_bert(args.out, args.repeats, args.rounds)


if __name__ == "__main__":
    main()
