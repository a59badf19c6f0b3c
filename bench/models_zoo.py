"""Many transformers model families, built offline from small configs with random weights,
each compiled by ``taskloom.torch.compile`` and checked and timed against eager PyTorch in
one run: a regression table of what compiles, what falls back to PyTorch, and the speed.

    .venv/bin/python bench/models_zoo.py [--models bert,gpt2,vit] [--rounds 5] [--seq 64]
        [--repeats 10] [--threads T] [--compare-ort] [--json FILE]

Every model is made with ``AutoConfig.for_model(TYPE, **small)`` and ``AutoModel.from_config``
(or the encoder of an encoder-decoder), no downloads: hidden size 128, two layers, four
heads for the text models, small stages for the vision ones (``FAMILIES`` lists them). The
attention implementation is the library's default (``sdpa`` where the family has it), as a
user gets it. Each model is called on one input (batch 1): ``--seq`` token ids for text
models, a 224 x 224 image, one second of 16 kHz audio, or Whisper's 3000 mel frames; the
first tensor output (``last_hidden_state``, else the first tensor) is compared.

A row gives the parameter count; the compile time (the first call of the compiled model:
dynamo's capture and taskloom's compilation; the JSON adds ``graphs``, how many graphs
dynamo passed to taskloom); the nodes that ran in PyTorch
(``taskloom.torch.fallbacks``, grouped by operator; ``graph`` means a whole captured graph);
the max relative difference, ``max|taskloom - eager| / max|eager|``; the median times of
eager PyTorch and taskloom, timed taking turns in ``--rounds`` rounds of ``--repeats`` calls
(:func:`taskloom.bench.timing.time_rounds`) on ``--threads`` cores (default: all); and the
speedup, eager ms / taskloom ms. With ``--compare-ort`` each model is also exported by
``torch.onnx.export`` and run by ONNX Runtime (all graph optimizations, ``--threads``
threads) and by taskloom's ONNX path (``taskloom.onnx.from_onnx`` on the same file), each
checked against eager and timed in the same rounds; a second table gives ORT ms over
taskloom ms for both of taskloom's paths. A model that fails to build, compile or run is reported
with its reason and the others go on. ``--json FILE`` writes::

    {"command", "args", "rows": [{"model", "type", "params", "compile_s", "graphs", "fallbacks":
      {op: count}, "fallback_nodes", "max_rel_diff", "eager_ms", "taskloom_ms", "eager_round_ms",
      "taskloom_round_ms", "speedup", "error", "ort_ms", "ort_rel_diff", "vs_ort", "ort_error", "onnx_ms", "onnx_rel_diff",
      "onnx_vs_ort", "onnx_error"}, ...],
     "geomean_speedup", "machine", "versions"}
"""
from __future__ import annotations

import argparse
import math
import os
import shlex
import statistics
import sys
import time
import warnings
from collections import Counter
from typing import Any, Callable

TEXT = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512, vocab_size=1000)
#: name -> (model type for AutoConfig.for_model, config keyword arguments, input kind, part).
#: Input kinds: "text" (token ids), "image" (1x3x224x224), "audio" (16000 samples),
#: "mel" (Whisper's 80 x 3000 features). Part: "" for the model, "encoder" for its encoder.
FAMILIES: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "bert": ("bert", TEXT, "text", ""),
    "roberta": ("roberta", TEXT, "text", ""),
    "xlm-roberta": ("xlm-roberta", TEXT, "text", ""),
    "electra": ("electra", {**TEXT, "embedding_size": 128}, "text", ""),
    "albert": ("albert", {**TEXT, "embedding_size": 64}, "text", ""),
    "distilbert": ("distilbert", dict(dim=128, n_layers=2, n_heads=4, hidden_dim=512, vocab_size=1000), "text", ""),
    "deberta-v2": ("deberta-v2", TEXT, "text", ""),
    "mobilebert": ("mobilebert", dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=128, embedding_size=64, intra_bottleneck_size=64,
                                      true_hidden_size=64, vocab_size=1000), "text", ""),
    "gpt2": ("gpt2", dict(n_embd=128, n_layer=2, n_head=4, vocab_size=1000, use_cache=False), "text", ""),
    "gpt_neo": ("gpt_neo", dict(hidden_size=128, num_layers=2, num_heads=4, vocab_size=1000, use_cache=False,
                                attention_types=[[["global", "local"], 1]], window_size=32), "text", ""),
    "opt": ("opt", dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, ffn_dim=512,
                        word_embed_proj_dim=128, vocab_size=1000, use_cache=False), "text", ""),
    "bloom": ("bloom", dict(hidden_size=128, n_layer=2, n_head=4, vocab_size=1000, use_cache=False), "text", ""),
    "llama": ("llama", {**TEXT, "num_key_value_heads": 2, "use_cache": False}, "text", ""),
    "qwen2": ("qwen2", {**TEXT, "num_key_value_heads": 2, "use_cache": False}, "text", ""),
    "t5-encoder": ("t5", dict(d_model=128, d_kv=32, d_ff=512, num_layers=2, num_heads=4, vocab_size=1000),
                   "text", "encoder"),
    "bart-encoder": ("bart", dict(d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                  decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512,
                                  vocab_size=1000), "text", "encoder"),
    "vit": ("vit", dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512),
            "image", ""),
    "swin": ("swin", dict(embed_dim=32, depths=[1, 1, 2, 1], num_heads=[2, 2, 4, 8]), "image", ""),
    "convnext": ("convnext", dict(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1]), "image", ""),
    "resnet": ("resnet", dict(embedding_size=32, hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 1, 1],
                              layer_type="bottleneck"), "image", ""),
    "wav2vec2": ("wav2vec2", dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=512, conv_dim=[128] * 7, num_conv_pos_embeddings=64,
                                  num_conv_pos_embedding_groups=8), "audio", ""),
    "whisper-encoder": ("whisper", dict(d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                        decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512),
                        "mel", "encoder"),
    # full-size models, where attention's share of the time is what it is in use (not in the default set)
    "vit-base": ("vit", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
                 "image", ""),
    "whisper-base-encoder": ("whisper", dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                                             decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048),
                             "mel", "encoder"),
    "wav2vec2-base": ("wav2vec2", dict(), "audio", ""),
}
#: The families run by default: the small configs.
SMALL = [name for name in FAMILIES if name not in ("vit-base", "whisper-base-encoder", "wav2vec2-base")]


def build(name: str, seq: int, seed: int = 0) -> tuple[Any, tuple[Any, ...]]:
    """``name``'s eval-mode model (returning its first tensor output) and one batch-1 input."""
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    model_type, kwargs, kind, part = FAMILIES[name]
    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model(model_type, **kwargs)
    model = transformers.AutoModel.from_config(config)
    if part == "encoder":
        model = model.get_encoder()
    if kind == "text":
        limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        if limit is not None and seq > limit:
            raise ValueError(f"--seq {seq} is longer than {name}'s {limit} positions")
        inputs: tuple[Any, ...] = (torch.randint(0, config.vocab_size, (1, seq), dtype=torch.int64),)
    elif kind == "image":
        inputs = (torch.randn(1, 3, 224, 224),)
    elif kind == "audio":
        inputs = (torch.randn(1, 16000),)
    else:
        inputs = (torch.randn(1, config.num_mel_bins, 2 * config.max_source_positions),)
    return FirstOutput(model).eval(), inputs


def _first_tensor(out: Any) -> Any:
    import torch
    if isinstance(out, torch.Tensor):
        return out
    hidden = getattr(out, "last_hidden_state", None)
    if isinstance(hidden, torch.Tensor):
        return hidden
    for item in (out.values() if isinstance(out, dict) else out):
        if isinstance(item, torch.Tensor):
            return item
    raise TypeError(f"no tensor in the output {type(out).__name__}")


def _module_base() -> Any:
    import torch
    return torch.nn.Module


class FirstOutput(_module_base()):  # type: ignore[misc]
    """A model called positionally with its main input, returning its first tensor output."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Any) -> Any:
        return _first_tensor(self.model(x))


def fallback_counts(fallbacks: list[Any]) -> dict[str, int]:
    """The operators that ran in PyTorch, with how many nodes (or whole graphs) each."""
    return dict(Counter(str(f.op) for f in fallbacks).most_common())


def max_rel_diff(got: Any, want: Any) -> float:
    """``max|got - want| / max|want|`` over the whole output (0 for two zero outputs)."""
    got, want = got.detach().double(), want.detach().double()
    if got.shape != want.shape:
        return math.inf
    scale = float(want.abs().max())
    diff = float((got - want).abs().max())
    return diff / scale if scale else diff


def _onnx_calls(model: Any, inputs: tuple, threads: int, row: dict[str, Any], want: Any) -> dict[str, Callable]:
    """The model exported by torch.onnx (as ``bench model`` does) and run by ONNX Runtime
    (``ort``) and by taskloom's ONNX path (``taskloom_onnx``), each checked against eager;
    a system that fails is left out, its reason in ``ort_error`` or ``onnx_error``."""
    import tempfile
    from pathlib import Path

    import torch
    import taskloom.onnx
    from taskloom.bench.peers import first_output, prepare
    calls: dict[str, Callable] = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            prepared = prepare("ort", model, inputs, threads=threads, workdir=Path(tmp))
            row["ort_rel_diff"] = max_rel_diff(torch.from_numpy(prepared.run()), want)
            calls["ort"] = prepared.run
        except Exception as exc:  # ORT's cells stay empty; the others still count
            row["ort_error"] = _reason(exc)
            return calls
        try:
            compiled = taskloom.onnx.from_onnx(str(Path(tmp) / "model.onnx"))
            feeds = [x.numpy() for x in inputs]
            row["onnx_rel_diff"] = max_rel_diff(torch.from_numpy(first_output(compiled(*feeds))), want)
            calls["taskloom_onnx"] = lambda: compiled(*feeds)
        except Exception as exc:
            row["onnx_error"] = _reason(exc)
    return calls


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]


def run_model(name: str, seq: int, rounds: int, repeats: int,
              time_rounds: Callable[..., dict[str, Any]] | None = None, ort_threads: int = 0) -> dict[str, Any]:
    """One row: the model built, compiled, compared and timed (with ONNX Runtime too where
    ``ort_threads`` > 0); ``error`` set where a step failed."""
    import torch
    import taskloom
    import taskloom.torch
    from taskloom.bench import timing
    time_rounds = time_rounds or timing.time_rounds
    row: dict[str, Any] = {"model": name, "type": FAMILIES[name][0], "params": None, "compile_s": None,
                           "graphs": None, "fallbacks": {}, "fallback_nodes": None, "max_rel_diff": None,
                           "eager_ms": None,
                           "taskloom_ms": None, "eager_round_ms": None, "taskloom_round_ms": None,
                           "speedup": None, "error": None, "ort_ms": None, "ort_rel_diff": None,
                           "vs_ort": None, "ort_error": None, "onnx_ms": None, "onnx_rel_diff": None,
                           "onnx_vs_ort": None, "onnx_error": None}
    step = "build"
    try:
        model, inputs = build(name, seq)
        row["params"] = sum(p.numel() for p in model.parameters())
        step = "eager"
        with torch.inference_mode():
            want = model(*inputs)
        step = "compile"
        # every model here shares FirstOutput.forward's code: without a reset, dynamo would
        # stop compiling it (and run it eagerly) after its recompile limit of 8 models
        torch._dynamo.reset()
        compiled = taskloom.torch.compile(model)
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            started = time.perf_counter()
            got = compiled(*inputs)
            row["compile_s"] = time.perf_counter() - started
        backend = compiled.taskloom_backend
        row["graphs"] = len(backend.compiled) + len(backend._eager_graphs)
        if not row["graphs"]:
            raise RuntimeError("dynamo passed no graph to taskloom (the model ran eagerly)")
        fell = taskloom.torch.fallbacks(compiled)
        row["fallbacks"] = fallback_counts(fell)
        row["fallback_nodes"] = len(fell)
        row["max_rel_diff"] = max_rel_diff(got, want)
        step = "time"

        def eager() -> Any:
            with torch.inference_mode():
                return model(*inputs)

        def tl() -> Any:
            with torch.inference_mode():
                return compiled(*inputs)

        calls = {"eager": eager, "taskloom": tl}
        if ort_threads:
            calls.update(_onnx_calls(model, inputs, ort_threads, row, want))
        times = time_rounds(calls, repeats=repeats, rounds=rounds, warmup=2)
        for system, key, error in (("ort", "ort_ms", "ort_error"), ("taskloom_onnx", "onnx_ms", "onnx_error")):
            if system not in times:
                continue
            if isinstance(times[system], Exception):
                row[error] = _reason(times[system])
            else:
                row[key] = statistics.median([t for r in times[system] for t in r])
        for system in ("eager", "taskloom"):
            result = times[system]
            if isinstance(result, Exception):
                raise result
            row[f"{system}_round_ms"] = [statistics.median(r) for r in result]
            row[f"{system}_ms"] = statistics.median([t for r in result for t in r])
        row["speedup"] = row["eager_ms"] / row["taskloom_ms"]
        if row["ort_ms"] is not None:
            row["vs_ort"] = row["ort_ms"] / row["taskloom_ms"]
            if row["onnx_ms"] is not None:
                row["onnx_vs_ort"] = row["ort_ms"] / row["onnx_ms"]
    except Exception as exc:  # reported in the row; the other models go on
        row["error"] = f"{step}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    return row


def _num(x: Any, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def fallback_text(row: dict[str, Any]) -> str:
    """``0``, or ``3 (aten.cumsum x2, aten.as_strided_)``."""
    if row.get("fallback_nodes") is None:
        return "-"
    ops = ", ".join(f"{op.removeprefix('aten.').removesuffix('.default')}{f' x{n}' if n > 1 else ''}"
                    for op, n in row["fallbacks"].items())
    return f"{row['fallback_nodes']} ({ops})" if ops else "0"


def params_text(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.2f}M"


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of ``rows``, errors in a list below it."""
    lines = ["| model | params | compile s | fell back (ops) | max rel diff | eager ms | taskloom ms | speedup |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {params_text(r['params'])} | {_num(r['compile_s'], '.1f')} | "
                     f"{fallback_text(r)} | {_num(r['max_rel_diff'], '.1e')} | {_num(r['eager_ms'], '.2f')} | "
                     f"{_num(r['taskloom_ms'], '.2f')} | "
                     f"{'-' if r['speedup'] is None else format(r['speedup'], '.2f') + 'x'} |")
    mean = geomean([r["speedup"] for r in rows if r["speedup"] is not None])
    if mean is not None:
        lines.append(f"\nGeometric mean speedup (eager ms / taskloom ms): {mean:.2f}x "
                     f"over {sum(r['speedup'] is not None for r in rows)} models")
    compared = [r for r in rows if r.get("vs_ort") is not None]
    if compared:
        lines.append("\n| model | ONNX Runtime ms | ORT rel diff | taskloom vs ORT (ORT ms / taskloom ms) | "
                     "taskloom ONNX path ms | its rel diff | ONNX path vs ORT |\n|---|---|---|---|---|---|---|")
        lines += [f"| {r['model']} | {r['ort_ms']:.2f} | {_num(r['ort_rel_diff'], '.1e')} | {r['vs_ort']:.2f}x | "
                  f"{_num(r.get('onnx_ms'), '.2f')} | {_num(r.get('onnx_rel_diff'), '.1e')} | "
                  f"{_num(r.get('onnx_vs_ort'), '.2f')}{'x' if r.get('onnx_vs_ort') else ''} |" for r in compared]
        lines.append(f"\nGeometric mean against ONNX Runtime: {geomean([r['vs_ort'] for r in compared]):.2f}x "
                     f"over {len(compared)} models")
        onnx = [r["onnx_vs_ort"] for r in compared if r.get("onnx_vs_ort")]
        if onnx:
            lines.append(f"Geometric mean of the ONNX path against ONNX Runtime: {geomean(onnx):.2f}x "
                         f"over {len(onnx)} models")
    for key, who in (("ort_error", "ONNX Runtime"), ("onnx_error", "taskloom's ONNX path")):
        failed = [r for r in rows if r.get(key)]
        if failed:
            lines.append(f"\n{who} could not run:\n" + "\n".join(f"- {r['model']}: {r[key]}" for r in failed))
    errors = [r for r in rows if r["error"]]
    if errors:
        lines.append("\nFailed:\n" + "\n".join(f"- {r['model']}: {r['error']}" for r in errors))
    return "\n".join(lines)


def record(rows: list[dict[str, Any]], args: dict[str, Any], command: str,
           with_host: bool = True) -> dict[str, Any]:
    """What ``--json`` writes."""
    out: dict[str, Any] = {"command": command, "args": args, "rows": rows,
                           "geomean_speedup": geomean([r["speedup"] for r in rows if r["speedup"] is not None])}
    if with_host:
        from taskloom.bench.timing import machine, versions
        out["machine"], out["versions"] = machine(), versions()
        try:
            import transformers
            out["versions"]["transformers"] = transformers.__version__
        except ImportError:
            pass
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(SMALL),
                        help=f"comma-separated, of: {', '.join(FAMILIES)} (default: the small ones)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per system per round")
    parser.add_argument("--seq", type=int, default=64, help="sequence length of the text models")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--compare-ort", action="store_true",
                        help="also export each model with torch.onnx and time ONNX Runtime in the same rounds")
    parser.add_argument("--json", default=None, metavar="FILE")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        parser.error(f"unknown models {', '.join(unknown)} (known: {', '.join(FAMILIES)})")
    if min(args.rounds, args.repeats, args.seq, args.threads) < 1:
        parser.error("--rounds, --repeats, --seq and --threads must be at least 1")
    import torch
    torch.set_num_threads(args.threads)
    rows = []
    for name in names:
        started = time.perf_counter()
        row = run_model(name, args.seq, args.rounds, args.repeats, ort_threads=args.threads if args.compare_ort else 0)
        rows.append(row)
        status = row["error"] or (f"speedup {row['speedup']:.2f}x, fell back {fallback_text(row)}, "
                                  f"rel diff {row['max_rel_diff']:.1e}")
        print(f"{name}: {status} ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        from taskloom.bench.timing import write_json
        command = "python bench/models_zoo.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
        write_json(args.json, record(rows, vars(args), command.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
