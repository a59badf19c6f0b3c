"""A CNN's convolutions, kernel by kernel, against ONNX Runtime's: ORT's own session profile
(its NCHWc ``Conv`` nodes, in execution order) matched in order to the convolution kernels of
a ``taskloom bench model --profile --json`` file, with sums by kind of convolution. Matching
by order holds for chains of layers (ResNet-50, MobileNet-V2), not for a graph whose parallel
branches the two run in different orders (Inception-V3).

    taskloom bench model resnet50 --compare ort --profile --json r50.json
    python bench/ort_kernels.py resnet50 r50.json
    taskloom bench model resnet50 --batch 8 --compare ort --profile --json r50-b8.json
    python bench/ort_kernels.py resnet50 r50-b8.json --batch 8 --runs 12
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
from pathlib import Path


def ort_conv_times(name: str, runs: int = 40, batch: int = 1) -> list[tuple[float, list, list]]:
    """(median ms, input shapes, output shapes) of each Conv node of ``name`` in ORT, in order."""
    import onnxruntime as ort
    import torch

    from taskloom.bench import zoo
    model, inputs = zoo.build(name, batch)
    work = Path(tempfile.mkdtemp())
    with torch.inference_mode():
        torch.onnx.export(model, tuple(inputs), work / "model.onnx", dynamo=True, verbose=False)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = 2
    opts.enable_profiling = True
    opts.profile_file_prefix = str(work / "profile")
    session = ort.InferenceSession(str(work / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}
    for _ in range(runs):
        session.run(None, feeds)
    events = json.load(open(session.end_profiling()))
    times, info, order = collections.defaultdict(list), {}, []
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            node = e["name"][: -len("_kernel_time")]
            if node not in info:
                order.append(node)
            times[node].append(e["dur"] / 1000)
            shapes = lambda key: [list(t.values())[0] for t in e["args"].get(key, [])]  # noqa: E731
            info[node] = (e["args"].get("op_name"), shapes("input_type_shape"), shapes("output_type_shape"))
    skip = runs // 4  # the first runs warm up
    return [(statistics.median(times[n][skip:]), info[n][1], info[n][2]) for n in order if info[n][0] == "Conv"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("profile_json", help="a `taskloom bench model --profile --json` file of the same model")
    p.add_argument("--batch", type=int, default=1, help="the batch size the profile was taken at (default 1)")
    p.add_argument("--runs", type=int, default=40, help="ORT runs profiled, the first quarter dropped (default 40)")
    args = p.parse_args(argv)
    ours = [k for k in json.load(open(args.profile_json))["profile"] if k["anchor"] == "conv2d"]
    ours.sort(key=lambda k: int(k["name"][1:].split("_")[0]))  # kernels are numbered in execution order
    theirs = ort_conv_times(args.model, args.runs, args.batch)
    if len(ours) != len(theirs):
        print(f"{len(ours)} taskloom convolution kernels against {len(theirs)} ORT Conv nodes: no match by order")
        return 1
    sums: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    print("| kernel | conv | in -> out | taskloom ms | ORT ms | ORT / taskloom |\n|---|---|---|---|---|---|")
    for k, (ms, ins, outs) in zip(ours, theirs):
        (n, c, h, _), (o, _, kh, kw), oh = ins[0], ins[1], outs[0][2]
        kind = f"{kh}x{kw}" + (" stride 2" if oh < h else "")
        sums[kind][0] += k["median_ms"]
        sums[kind][1] += ms
        print(f"| {k['name']} | {kind} | {c}x{h}x{h} -> {o}x{oh}x{oh} | {k['median_ms']:.3f} | {ms:.3f} | "
              f"{ms / k['median_ms']:.2f} |")
    print("\n| convolutions | taskloom ms | ORT ms | ORT / taskloom |\n|---|---|---|---|")
    for kind, (a, b) in sums.items():
        print(f"| {kind} | {a:.2f} | {b:.2f} | {b / a:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
