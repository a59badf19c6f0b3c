"""Benchmarks on an NVIDIA GPU: ``taskloom bench op matmul --target cuda`` and ``taskloom
bench model NAME --target cuda [--dtype float16]``.

taskloom (the model through ``torch.compile(backend="taskloom")``, an operator through
``taskloom.compile`` for the device) against PyTorch eager (cuBLAS, cuDNN), ``torch.compile``
with its default mode (inductor) and with ``mode="reduce-overhead"`` (inductor with CUDA
graphs), in one process, on the same inputs. Each system is checked against eager PyTorch
first, then timed with CUDA events in rounds: in every round each system is warmed up and
timed ``repeats`` calls in a block of its own, the order shifted each round, as on the CPU
(:func:`taskloom.bench.timing.time_rounds`). The record names the GPU, its SMs, memory and
clocks.
"""
from __future__ import annotations

import statistics
import subprocess
import time
from typing import Any, Callable, Sequence

from taskloom.bench.timing import time_rounds
from taskloom.errors import TaskloomError

#: The systems, in table order: taskloom, then the peers.
SYSTEMS = ("taskloom", "torch", "inductor", "cudagraphs")
WARMUP = 5


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise TaskloomError("GPU benchmarks run the peers and feed taskloom through PyTorch; install torch "
                            "with CUDA") from None
    if not torch.cuda.is_available():
        raise TaskloomError("--target cuda benchmarks time on an NVIDIA GPU, and torch sees none here "
                            "(torch.cuda.is_available() is False)")
    return torch


def gpu_facts() -> dict[str, Any]:
    """The GPU: name, compute capability, SMs, memory, and its clocks where nvidia-smi tells."""
    torch = _torch()
    p = torch.cuda.get_device_properties(0)
    facts: dict[str, Any] = {"name": p.name, "capability": f"{p.major}.{p.minor}", "sms": p.multi_processor_count,
                             "memory_bytes": p.total_memory, "cuda": torch.version.cuda}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,clocks.mem,driver_version",
                              "--format=csv,noheader,nounits", "-i", "0"], capture_output=True, text=True, timeout=10)
        sm, sm_max, mem, driver = (v.strip() for v in out.stdout.strip().split(","))
        facts.update(sm_clock_mhz=int(sm), sm_clock_max_mhz=int(sm_max), mem_clock_mhz=int(mem), driver=driver)
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return facts


def time_cuda_rounds(calls: dict[str, Callable[[], Any]], repeats: int, rounds: int,
                     warmup: int = WARMUP) -> dict[str, list[list[float]] | Exception]:
    """:func:`~taskloom.bench.timing.time_rounds` with each call between two CUDA events."""
    torch = _torch()
    return time_rounds(calls, repeats, rounds, warmup, block=lambda fn, r, w: _time_block(torch, fn, r, w))


def _time_block(torch: Any, fn: Callable[[], Any], repeats: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def _rows(checked: dict[str, tuple[Callable[[], Any] | None, dict[str, Any]]], repeats: int, rounds: int,
          flop: int | None) -> list[dict[str, Any]]:
    """Time the systems that passed their check; one row per system, in table order."""
    times = time_cuda_rounds({n: call for n, (call, _) in checked.items() if call is not None}, repeats, rounds)
    rows = []
    for name, (_, row) in checked.items():
        blocks = times.get(name)
        if isinstance(blocks, Exception):
            row["error"] = f"{type(blocks).__name__}: {blocks}"
        elif blocks:
            ms = statistics.median(t for block in blocks for t in block)
            row.update(median_ms=ms, round_ms=[statistics.median(b) for b in blocks],
                       tflops=flop / ms / 1e9 if flop else None)
        rows.append(row)
    return rows


def _check(name: str, make: Callable[[], Callable[[], Any]], reference: Any, tolerance: float
           ) -> tuple[Callable[[], Any] | None, dict[str, Any]]:
    """A system's call once it ran without NaN, and its row (an error where it disagreed
    with the reference beyond ``tolerance``);
    ``first_call_s`` is the seconds to its first result (a compiler's compile included)."""
    torch = _torch()
    row: dict[str, Any] = {"system": name, "median_ms": None, "tflops": None, "max_rel_diff": None, "error": None}
    try:
        started = time.perf_counter()
        call = make()
        with torch.inference_mode():
            got = call()
        torch.cuda.synchronize()
        row["first_call_s"] = time.perf_counter() - started
        diff = float((got.float() - reference.float()).abs().max() / reference.float().abs().max().clamp(min=1e-30))
        row["max_rel_diff"] = diff
        if diff != diff:  # NaN: nothing worth timing
            raise TaskloomError("its result has NaN where eager PyTorch's has none")
        if not diff <= tolerance:  # timed still, so that a near miss is measured, and marked
            row["error"] = f"its result differs from eager PyTorch by {diff:.2e} (relative), over {tolerance}"
        return call, row
    except Exception as exc:  # a failing system is reported; the others go on
        row["error"] = f"{type(exc).__name__}: {exc}".strip()
        return None, row


def _peers(torch: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> dict[str, Callable[[], Callable[[], Any]]]:
    """How each peer system makes its call of ``fn(*args)``."""
    def compiled(**options: Any) -> Callable[[], Any]:
        c = torch.compile(fn, **options)
        return lambda: c(*args)
    return {"torch": lambda: (lambda: fn(*args)),
            "inductor": lambda: compiled(),
            "cudagraphs": lambda: compiled(mode="reduce-overhead"),
            "taskloom": lambda: compiled(backend=_taskloom_backend())}


def _taskloom_backend() -> Any:
    """What ``backend="taskloom"`` names, taken directly (the name resolves through the
    installed package's entry point, and a source tree on PYTHONPATH has none), without
    falling back to eager PyTorch: a graph that does not compile is a failed row, not
    PyTorch's time under taskloom's name."""
    from taskloom.frontend.torch import Backend
    return Backend(fallback=False)


def bench_matmul(M: int, K: int, N: int, dtype: str, repeats: int, rounds: int,
                 systems: Sequence[str] = SYSTEMS) -> dict[str, Any]:
    """``A[M, K] @ B[K, N]`` in ``dtype`` on the GPU: the rows of ``systems`` and the problem."""
    torch = _torch()
    t = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=t, generator=g)
    b = torch.randn(K, N, device="cuda", dtype=t, generator=g)
    reference = a.float() @ b.float()

    def matmul(x: Any, y: Any) -> Any:  # a Python function, which torch.compile traces
        return x @ y
    makes = _peers(torch, matmul, (a, b))
    tolerance = 1e-2 if dtype != "float32" else 1e-4
    checked = {name: _check(name, makes[name], reference, tolerance) for name in _known(systems)}
    torch._dynamo.reset()
    return {"op": "matmul", "dims": {"M": M, "K": K, "N": N}, "dtype": dtype, "flop": 2 * M * N * K,
            "rows": _rows(checked, repeats, rounds, 2 * M * N * K), "gpu": gpu_facts()}


def _known(systems: Sequence[str]) -> list[str]:
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        raise TaskloomError(f"unknown GPU benchmark system {unknown[0]!r}; known: {', '.join(SYSTEMS)}")
    return [s for s in SYSTEMS if s in systems]


def run_op(args: Any) -> dict[str, Any]:
    """``taskloom bench op matmul --target cuda``: every ``--shape`` (M,N,K) in ``--dtype``."""
    if args.op != "matmul":
        raise TaskloomError(f"bench op {args.op} --target cuda: only matmul is benchmarked on the GPU so far")
    results = []
    for m, n, k in args.shape:
        results.append(bench_matmul(m, k, n, args.dtype, args.repeats, args.rounds))
        print(format_rows(f"matmul {m}x{n}x{k} ({args.dtype}) on {results[-1]['gpu']['name']}",
                          results[-1]["rows"]), flush=True)
    return {"op": "matmul", "results": results}


def bench_model(name: str, batch: int, seq: int, dtype: str, repeats: int, rounds: int,
                systems: Sequence[str] = SYSTEMS) -> dict[str, Any]:
    """A benchmark model (:mod:`taskloom.bench.zoo`) on the GPU in ``dtype``: the rows of ``systems``."""
    from taskloom.bench.zoo import build
    torch = _torch()
    model, inputs = build(name, batch=batch, seq=seq)
    t = getattr(torch, dtype)
    model = model.to(device="cuda", dtype=t).eval()
    inputs = tuple(x.to("cuda", t) if x.is_floating_point() else x.to("cuda") for x in inputs)
    with torch.inference_mode():
        reference = model(*inputs)
    reference = reference if isinstance(reference, torch.Tensor) else reference[0]

    def first(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            out = fn(*args)
            return out if isinstance(out, torch.Tensor) else out[0]
        return call
    makes = _peers(torch, first(model), inputs)
    tolerance = 2e-2 if dtype != "float32" else 1e-3
    with torch.inference_mode():
        checked = {system: _check(system, makes[system], reference, tolerance) for system in _known(systems)}
        rows = _rows(checked, repeats, rounds, None)
    torch._dynamo.reset()
    return {"model": name, "batch": batch, "seq": seq, "dtype": dtype, "rows": rows, "gpu": gpu_facts()}


def format_rows(title: str, rows: list[dict[str, Any]]) -> str:
    """A table: median ms, TFLOP/s where known, and "vs taskloom", taskloom's time over a
    system's (above 1: that system is faster than taskloom)."""
    base = next((r["median_ms"] for r in rows if r["system"] == "taskloom"), None)
    lines = [title, f"{'system':<12}{'median ms':>11}{'TFLOP/s':>9}{'vs taskloom':>12}  error"]
    for r in rows:
        ms, tf = r["median_ms"], r.get("tflops")
        speed = f"{base / ms:>12.2f}" if ms and base else f"{'-':>12}"
        lines.append(f"{r['system']:<12}{ms if ms is not None else float('nan'):>11.3f}"
                     f"{tf if tf is not None else float('nan'):>9.1f}{speed}  {r['error'] or ''}")
    return "\n".join(lines)
