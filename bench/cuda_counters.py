"""What the SIMT emulator, ptxas and the SASS say of taskloom's CUDA kernels, where no GPU is
at hand: for each kernel class, the schedule the CUDA path picks against the plain rule (a
thread an element), in warp instructions, global-memory requests and sectors, shared-memory
bank conflicts, and ptxas's registers and spills; then, for each config of the two matmul
templates (CUDA cores on float32, tensor cores on float16) and of the attention template,
its main loop's instructions in SASS (``cuobjdump -sass``, which needs ``nvdisasm`` on PATH: pip ``nvidia-cuda-cuobjdump``
and ``nvidia-cuda-nvdisasm``) and what the emulator counts of one call. Prints markdown
tables; ``--json`` keeps the numbers.

    .venv/bin/python bench/cuda_counters.py [--arch sm_90a] [--json FILE]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
from collections import Counter
from typing import Any

import numpy as np

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.schedule.cuda import schedule_task_cuda
from taskloom.schedule.cuda.matmul import matmul_candidate
from taskloom.target import CudaTarget

rng = np.random.default_rng(0)


def cases() -> list[tuple[str, Graph]]:
    """(name, a graph of one fused group) for each kernel class."""
    x = input((64, 768), name="x")
    long = input((8, 4096), name="long")
    a = input((256, 256), name="a")
    w = taskloom.asarray(rng.standard_normal((256, 256)).astype(np.float32))
    return [("softmax 64x768", Graph([x], [ops.softmax(x, axis=-1)])),
            ("layer_norm 64x768", Graph([x], [ops.layer_norm(x, (768,))])),
            ("sum of rows 8x4096", Graph([long], [ops.sum(long, axis=-1)])),
            ("matmul+relu 256^3", Graph([a], [ops.relu(ops.matmul(a, w))])),
            ("bias+gelu 64x768", Graph([x], [ops.gelu(x + taskloom.asarray(rng.standard_normal(768).astype(np.float32)))]))]


def measure(name: str, graph: Graph, target: CudaTarget, schedule: str) -> dict[str, Any]:
    """Counters of one launch of the graph's kernel, as the CUDA path schedules it
    (``chosen``) or by the plain rule (``rule``: a thread an element)."""
    [group] = fuse_graph(graph)
    found = matmul_candidate(group.task, target) if schedule == "chosen" else None
    if found is not None:
        from taskloom.schedule.cuda.matmul import choose_config
        fn = found.build(choose_config(found.tunable, target.num_sms), "k").fn
    elif schedule == "chosen":
        fn = schedule_task_cuda(group.task, target, "k")
    else:
        from taskloom.schedule.cuda.rules import per_element_kernel
        fn = per_element_kernel(group.task, "k")
    module = taskloom.build(fn, target=target, device="emulator")
    feeds = {id(t): rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in graph.inputs}
    args = [feeds[id(t)] if id(t) in feeds else t.numpy() for t in group.inputs]
    out = np.zeros(tuple(int(d) for d in graph.outputs[0].shape), np.float32)
    c = module["k"](*args, out).counters
    r = module.built.resources["k"]
    return {"kernel": name, "schedule": fn.attr("doc").split(": ", 1)[1], "warp_instructions": sum(c.instructions.values()),
            "global_load_requests": c.global_load_requests, "global_load_sectors": c.global_load_sectors,
            "bank_conflicts": c.bank_conflicts, "registers": r.registers, "spills": r.spill_stores + r.spill_loads}


LOOP_OPS = ("FFMA", "HMMA", "HGMMA", "LDSM", "LDGSTS", "UTMALDG", "SYNCS", "LDS", "LDG", "STS", "BAR")


def main_loop(lib_path: str) -> dict[str, int] | None:
    """Instruction counts of the kernel's main loop in the library's SASS: of its backward
    branches, the loop with the most FFMA or HMMA. None without cuobjdump."""
    if shutil.which("cuobjdump") is None:
        return None
    sass = subprocess.run(["cuobjdump", "-sass", lib_path], capture_output=True, text=True).stdout
    code = [(int(m.group(1), 16), m.group(2).split(".")[0].rstrip(";"), m.group(3))
            for m in re.finditer(r"/\*([0-9a-f]{4})\*/\s+(?:@!?U?P\w+\s+)?(\S+)\s*([^;]*)", sass)]
    best: Counter | None = None
    for addr, op, rest in code:
        jump = re.match(r"(0x[0-9a-f]+)", rest)
        if op == "BRA" and jump and int(jump.group(1), 16) < addr:
            loop = Counter(o for a, o, _ in code if int(jump.group(1), 16) <= a <= addr)
            if best is None or loop["FFMA"] + loop["HMMA"] + loop["HGMMA"] > best["FFMA"] + best["HMMA"] + best["HGMMA"]:
                best = loop
    if best is None:
        return None
    return {"instructions": sum(best.values()), **{k: best[k] for k in LOOP_OPS}}


def template_loops(target: CudaTarget) -> list[dict[str, Any]]:
    """Each config of the two matmul templates on a 256 x K x 256 matmul with a relu (K 256
    on CUDA cores, 2048 on tensor cores, where nvcc unrolls a loop of 8 steps whole): the
    SASS main loop, ptxas's registers, and the emulator's counters of one call."""
    from taskloom.schedule.cuda import matmul, matmul_mma
    from taskloom.schedule.cuda.matmul_wgmma import WgmmaConfig
    rows = []
    hopper = (WgmmaConfig(128, 128, 4, 2, tma=False), WgmmaConfig(128, 128, 4, 2),
              WgmmaConfig(128, 256, 4, 2), WgmmaConfig(128, 256, 4, 2, specialized=True)) if target.has_wgmma() else ()
    for dtype, K, find, configs in (("float32", 256, matmul.matmul_candidate, matmul.CONFIGS),
                                    ("float16", 2048, matmul_mma.mma_candidate, matmul_mma.CONFIGS + hopper)):
        a = input((256, K), dtype, name="a")
        w = rng.standard_normal((K, 256)).astype(dtype)
        [group] = fuse_graph(Graph([a], [ops.relu(ops.matmul(a, taskloom.asarray(w)))]))
        found = find(group.task, target)
        for config in configs:
            fn = found.build(config, "k").fn
            module = taskloom.build(fn, target=target, device="emulator")
            out = np.zeros((256, 256), dtype)
            c = module["k"](rng.standard_normal((256, K)).astype(dtype), w, out).counters
            used = module.built.resources["k"]
            rows.append({"template": fn.attr("template"), "config": str(config), "registers": used.registers,
                         "spills": used.spill_stores + used.spill_loads, "bank_conflicts": c.bank_conflicts,
                         **(main_loop(str(module.built.lib_path)) or {})})
    return rows + tf32_loops(target)


def tf32_loops(target: CudaTarget) -> list[dict[str, Any]]:
    """The tensor-core template on float32 factors as tf32 (``-tf32`` targets), at the
    model's pick for 4096^3, on the 256 x 2048 x 256 product with B laid [k][n] (its
    fragments read by the lanes) and [n][k] (a linear layer's weight: ldmatrix)."""
    import dataclasses
    from taskloom.schedule.cuda import matmul_mma, mma_model
    target = dataclasses.replace(target, tf32=True)
    rows = []
    for layout in ("[k][n]", "[n][k]"):
        a, b = input((256, 2048), name="a"), input((2048, 256) if layout == "[k][n]" else (256, 2048), name="b")
        [group] = fuse_graph(Graph([a, b], [ops.relu(ops.matmul(a, b if layout == "[k][n]" else ops.transpose(b, 0, 1)))]))
        found = matmul_mma.mma_candidate(group.task, target)
        config = mma_model.choose(dataclasses.replace(found.tunable, M=4096, N=4096, K=4096), target)
        fn = found.build(config, "k").fn
        module = taskloom.build(fn, target=target, device="emulator")
        feeds = {id(t): rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in (a, b)}
        c = module["k"](*[feeds[id(t)] for t in group.inputs], np.zeros((256, 256), np.float32)).counters
        used = module.built.resources["k"]
        rows.append({"template": "matmul_mma tf32", "config": f"{config}, B {layout}", "registers": used.registers,
                     "spills": used.spill_stores + used.spill_loads, "bank_conflicts": c.bank_conflicts,
                     **(main_loop(str(module.built.lib_path)) or {})})
    return rows


def sass_instructions(lib_path: str) -> int | None:
    """The instructions of the library's (one) kernel in SASS, the trailing padding left out;
    None without cuobjdump. For a kernel with no loop left (a 3x3 window unrolled), what a
    thread executes."""
    if shutil.which("cuobjdump") is None:
        return None
    sass = subprocess.run(["cuobjdump", "-sass", lib_path], capture_output=True, text=True).stdout
    ops_ = [m.group(1).split(".")[0] for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?(\S+)", sass)]
    while ops_ and ops_[-1] in ("NOP", "BRA"):
        ops_.pop()
    return len(ops_)


def depthwise_rows(target: CudaTarget) -> list[dict[str, Any]]:
    """MobileNet-V2-like depthwise 3x3 layers in float16 (with a relu6 and a bias): in NCHW on
    the tensor-core template, as they were scheduled before ``matmul.thin``, and by the rules;
    in NHWC (the layout a GPU graph gives them) a thread an element, and by the window kernel
    (``cuda.window``: 8 channels a thread), as now. ``per_output``: SASS instructions a
    thread executes over the outputs it computes."""
    from taskloom.ir.dtypes import bfloat16, float16, float32
    from taskloom.schedule.contraction import match_contraction
    from taskloom.schedule.cuda.matmul_mma import mma_kernel
    from taskloom.schedule.cuda.mma_model import choose
    from taskloom.schedule.cuda.rules import per_element_kernel
    rows = []
    for channels, size, stride in ((96, 56, 1), (144, 56, 2)):
        for layout in ("NCHW", "NHWC"):
            nhwc = layout == "NHWC"
            x = rng.standard_normal((1, size, size, channels) if nhwc else (1, channels, size, size)).astype(np.float16)
            w = rng.standard_normal((3, 3, 1, channels) if nhwc else (channels, 1, 3, 3)).astype(np.float16)
            b = rng.standard_normal(channels).astype(np.float16)
            xi = input(x.shape, "float16", name="x")
            y = ops.clip(ops.conv2d(xi, taskloom.asarray(w), taskloom.asarray(b), stride=stride, padding=1,
                                    groups=channels, layout=layout), 0, 6)
            [group] = fuse_graph(Graph([xi], [y]))
            if nhwc:
                schedules = (("a thread an element", per_element_kernel(group.task, "k")),
                             ("rules: window kernel", schedule_task_cuda(group.task, target, "k")))
            else:
                con = match_contraction(group.task, (float32, float16, bfloat16))
                schedules = (("tensor-core template", mma_kernel(con, choose(con, target), "k")),
                             ("rules", schedule_task_cuda(group.task, target, "k")))
            for name, fn in schedules:
                module = taskloom.build(fn, target=target, device="emulator")
                args = [x if t is xi else t.numpy() for t in group.inputs]
                out = np.zeros(tuple(int(d) for d in y.shape), np.float16)
                c = module["k"](*args, out).counters
                threads = int(np.prod([int(e.value) for e in (*fn.attr("grid"), *fn.attr("block"))]))
                sass = sass_instructions(str(module.built.lib_path)) if "window" in name or "element" in name else None
                rows.append({"layer": f"{channels}x{size}x{size}, stride {stride}, {layout}", "schedule": name,
                             "warp_instructions": sum(c.instructions.values()), "mma": c.instructions["mma"],
                             "global_load_requests": c.global_load_requests,
                             "global_load_sectors": c.global_load_sectors,
                             "registers": module.built.resources["k"].registers,
                             "per_output": None if sass is None else round(sass * threads / out.size, 1)})
    return rows


def store_rows(target: CudaTarget) -> list[dict[str, Any]]:
    """C's store on the tensor-core templates, staged in shared memory (as built now) against
    straight from the fragments (as before), float16 with the model's config: a BERT product
    with its bias and GELU, and ResNet-50's 1x1 convolution of 64 to 256 channels at 56x56 with
    its bias and ReLU (NHWC). The emulator's store requests and sectors, shared-memory bank
    conflicts, and ptxas's registers."""
    from unittest import mock

    from taskloom.schedule.cuda import matmul_mma
    from taskloom.schedule.cuda.mma_model import choose
    rows = []
    x = input((128, 768), "float16", name="x")
    bert = ops.gelu(ops.matmul(x, taskloom.asarray(rng.standard_normal((768, 3072)).astype(np.float16) * 0.03))
                    + taskloom.asarray(rng.standard_normal(3072).astype(np.float16)))
    img = input((1, 56, 56, 64), "float16", name="x")
    conv = ops.relu(ops.conv2d(img, taskloom.asarray(rng.standard_normal((1, 1, 64, 256)).astype(np.float16) * 0.1),
                               taskloom.asarray(rng.standard_normal(256).astype(np.float16)), layout="NHWC"))
    for name, graph in (("BERT 128x3072x768 + bias + GELU", Graph([x], [bert])),
                        ("1x1 conv 64->256 at 56x56 + bias + ReLU", Graph([img], [conv]))):
        [group] = fuse_graph(graph)
        found = matmul_mma.mma_candidate(group.task, target)
        config = choose(found.tunable, target)
        feeds = [rng.standard_normal(tuple(int(d) for d in t.shape)).astype(np.float16) if t is graph.inputs[0]
                 else t.numpy() for t in group.inputs]
        for how in ("staged", "from the fragments"):
            with mock.patch.object(matmul_mma._Kernel, "_stage_shape", lambda self: None) if how != "staged" \
                    else contextlib.nullcontext():
                fn = found.build(config, "k").fn
            module = taskloom.build(fn, target=target, device="emulator")
            out = np.zeros(tuple(int(d) for d in graph.outputs[0].shape), np.float16)
            c = module["k"](*feeds, out).counters
            rows.append({"product": name, "config": str(config), "store": how,
                         "store_requests": c.global_store_requests, "store_sectors": c.global_store_sectors,
                         "bank_conflicts": c.bank_conflicts, "registers": module.built.resources["k"].registers})
    return rows


def attention_rows(target: CudaTarget) -> list[dict[str, Any]]:
    """The attention template on BERT-base's heads (12 of 64, 128 and 512 tokens, float16):
    the SASS main loop (one block of keys), ptxas's registers and the emulator's counters."""
    from taskloom.schedule.attention import match_attention
    from taskloom.schedule.cuda.attention import attention_kernel
    rows = []
    for seq in (128, 512):
        q = input((1, 12, seq, 64), "float16", name="q")
        [group] = fuse_graph(Graph([q], [ops.attention(q, q, q)]))
        module = taskloom.build(attention_kernel(match_attention(group.task), "k"), target=target, device="emulator")
        x = rng.standard_normal((1, 12, seq, 64)).astype(np.float16)
        c = module["k"](x, x, x, np.zeros_like(x)).counters
        used = module.built.resources["k"]
        rows.append({"template": "attention_cuda", "config": f"12 heads x {seq} tokens, head 64",
                     "registers": used.registers, "spills": used.spill_stores + used.spill_loads,
                     "bank_conflicts": c.bank_conflicts, **(main_loop(str(module.built.lib_path)) or {})})
    return rows


#: issue 29's bar shapes (M, N, K) and cuBLAS's float16 TFLOP/s on an H100 SXM for each (the
#: anchors of the issue, measured with PyTorch 2.11 / CUDA 13): what a prediction stands beside
BAR_SHAPES = {(4096, 4096, 4096): 717, (2048, 2048, 2048): 456, (2039, 2039, 2039): 122, (128, 3072, 768): 31,
              (128, 768, 768): None, (128, 768, 3072): None, (128, 2304, 768): None}


def predictions(target: CudaTarget) -> list[dict[str, Any]]:
    """The analytic model's pick and predicted TFLOP/s for each bar shape, in float16 and
    tf32, at the target's boost clock: forecasts for the next GPU run to test (the model's
    rates and latencies were set from two H100 kernels; see mma_model's docstring)."""
    import dataclasses
    from taskloom.schedule.cuda import mma_model
    rows = []
    for tf32 in (False, True):
        t = dataclasses.replace(target, tf32=tf32)
        nbytes = 4 if tf32 else 2
        for (M, N, K), anchor in BAR_SHAPES.items():
            con = mma_model.Product(1, M, N, K)
            config = min(mma_model.target_space(t, nbytes),  # on sm_90a, wgmma's configs too
                         key=lambda c: mma_model.rank(con, c, t, nbytes))
            seconds = mma_model.cycles(con, config, t, nbytes) / (t.clock_mhz * 1e6)
            rows.append({"dtype": "tf32" if tf32 else "float16", "shape": f"{M}x{N}x{K}", "config": str(config),
                         "predicted_tflops": round(2 * M * N * K / seconds / 1e12, 1),
                         "cublas_fp16_tflops": anchor if not tf32 else None})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    target = CudaTarget.from_arch(args.arch)
    rows = [measure(name, graph, target, s) for name, graph in cases() for s in ("rule", "chosen")]
    head = ["kernel", "schedule", "warp_instructions", "global_load_requests", "global_load_sectors",
            "bank_conflicts", "registers", "spills"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(f"{r[h]:,}" if isinstance(r[h], int) else str(r[h]) for h in head) + " |")
    loops = template_loops(target) + attention_rows(target)
    cols = ("registers", "spills", "bank_conflicts", "instructions", *LOOP_OPS)
    print("\n| template | config | " + " | ".join(cols) + " |\n|" + "---|" * (len(cols) + 2))
    for r in loops:
        print(f"| {r['template']} | {r['config']} | " + " | ".join(str(r.get(k, "-")) for k in cols) + " |")
    predicted = predictions(target)
    cols = ("dtype", "shape", "config", "predicted_tflops", "cublas_fp16_tflops")
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in predicted:
        print("| " + " | ".join("-" if r[k] is None else str(r[k]) for k in cols) + " |")
    depthwise = depthwise_rows(target)
    cols = ("layer", "schedule", "warp_instructions", "mma", "global_load_requests", "global_load_sectors", "registers",
            "per_output")
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in depthwise:
        print("| " + " | ".join(f"{r[k]:,}" if isinstance(r[k], int) else "-" if r[k] is None else str(r[k])
                                for k in cols) + " |")
    stores = store_rows(target)
    cols = ("product", "config", "store", "store_requests", "store_sectors", "bank_conflicts", "registers")
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in stores:
        print("| " + " | ".join(f"{r[k]:,}" if isinstance(r[k], int) else str(r[k]) for k in cols) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"arch": args.arch, "rows": rows, "matmul_main_loops": loops, "predictions": predicted,
                       "depthwise": depthwise, "stores": stores}, f,
                      indent=2)


if __name__ == "__main__":
    main()
