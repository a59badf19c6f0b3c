"""``taskloom bench op``: one operator compiled by taskloom, timed against numpy, PyTorch and
ONNX Runtime on the same inputs.

    taskloom bench op matmul --shape M,N,K [--shape M,N,K ...] [--batch B]
        [--compare numpy,torch,ort] [--tune 0|1|2] [--repeats 30] [--rounds 3] [--target SPEC]
        [--json FILE]
    taskloom bench op conv2d --shape N,C,H,W,OC,KH,KW [--shape ...] [--stride S] [--pad P]
        [--groups G] [--layout NCHW|NHWC] [--compare torch,ort] [--tune 0|1|2] [--repeats 30]
        [--rounds 3] [--target SPEC] [--json FILE]

taskloom is always measured: the operator is traced on a graph input (a conv2d weight is a
constant, as a model's weights are), compiled with ``taskloom.compile`` and called through
the compiled graph; the compile time is reported apart. The peers are numpy
(``np.matmul(a, b, out=c)``), torch (``torch.matmul`` / ``F.conv2d`` in inference mode) and
ONNX Runtime (a one-node model, all graph optimizations, ``sess.run``); torch and ORT run
with the target's cores, numpy with its BLAS's own thread count (``OPENBLAS_NUM_THREADS``).
A peer that is not installed gets the error ``"not installed"``; a system that fails gets
its exception in ``error`` and the others still run. All systems see the same float32
inputs (seed 0) and are set up first, their outputs compared with a float64 numpy reference
(``max_abs_diff``). Then they are timed in ``--rounds`` rounds: in each, every system is warmed
up and timed ``--repeats`` times in a block of its own, one system after another, the order
shifted each round (see :func:`taskloom.bench.timing.time_rounds`). A system's figure is the
median of all its runs; ``round_ms`` keeps each round's median, and the table's ``spread``
is their range over that median (a wide one says the machine was noisy).

A conv2d's peers always take NCHW. taskloom takes NCHW too by default, and its layout pass
then runs the convolution in NHWC when that pays, converting the input and the result
inside the kernel; ``--layout NHWC`` gives taskloom the NHWC input and weight directly, as
between two convolutions of a model, where no conversion is left (the result is compared
after converting it back, outside the timing).

``--json FILE`` writes::

    {"op": "matmul" | "conv2d",
     "command": the command line as typed,
     "args": {"batch" | "stride", "pad", "groups", "layout", "compare", "tune", "repeats", "rounds",
              "target"},
     "results": [{"shape": [ints as given to --shape],
                  "dims": {named sizes, e.g. "B", "M", "N", "K" or "N" ... "OH", "OW"},
                  "flop": int,
                  "rows": [{"system", "median_ms", "gflops", "max_abs_diff", "error", "round_ms"}, ...],
                  "taskloom": {"compile_s", "tune", "target"}}, ...],   # one per --shape, in order
     "machine": {"cpu", "cores", "isa", "l1d", "l2", "l3", "platform", ...},
     "versions": {"taskloom", "numpy", "torch", "onnxruntime", "cc"}}

With a single ``--shape`` the top level also carries that result's ``shape``, ``dims``,
``flop``, ``rows`` and ``taskloom``. Failed measurements have ``null`` numbers and a message
in ``error`` (``null`` when the row is good). GFLOP/s counts 2*B*M*N*K for matmul and
2*N*OC*OH*OW*(C/groups)*KH*KW for conv2d; the table's "vs taskloom" is a system's GFLOP/s
over taskloom's (above 1: faster than taskloom).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import shlex
import statistics
import time
from typing import Any, Callable

import numpy as np

import taskloom
from taskloom.bench.timing import machine, time_rounds, versions, write_json
from taskloom.errors import TaskloomError
from taskloom.graph import Graph, input as graph_input
from taskloom.target import Target, get_target

#: The Python modules each peer needs; a missing one makes the peer's row "not installed".
PEER_MODULES: dict[str, tuple[str, ...]] = {"numpy": ("numpy",), "torch": ("torch",),
                                            "ort": ("onnx", "onnxruntime")}
ONNX_OPSET, ONNX_IR_VERSION = 17, 8
WARMUP = 3
_EPILOG = __doc__[__doc__.index("``--json FILE`` writes"):].replace("``", "")  # type: ignore[index]


# -- the problems -------------------------------------------------------------------------


class MatmulProblem:
    """``(B,) M x K @ (B,) K x N``: both operands are graph inputs."""

    op = "matmul"
    form = "M,N,K"
    peers = ("numpy", "torch", "ort")

    def __init__(self, shape: tuple[int, ...], args: argparse.Namespace):
        self.shape = shape
        self.batch: int | None = args.batch
        m, n, k = shape
        lead = () if self.batch is None else (self.batch,)
        rng = np.random.default_rng(0)
        self.arrays = {"a": rng.standard_normal((*lead, m, k), dtype=np.float32),
                       "b": rng.standard_normal((*lead, k, n), dtype=np.float32)}
        self.inputs = ("a", "b")
        self.dims = {"B": self.batch or 1, "M": m, "N": n, "K": k}
        self.out_shape = (*lead, m, n)
        self.flop = 2 * (self.batch or 1) * m * n * k

    def check(self) -> str | None:
        return None

    def reference(self) -> np.ndarray:
        return np.matmul(self.arrays["a"].astype(np.float64), self.arrays["b"].astype(np.float64))

    def taskloom_inputs(self) -> list[np.ndarray]:
        return [self.arrays[k] for k in self.inputs]

    def from_taskloom(self, out: np.ndarray) -> np.ndarray:
        return out

    def trace(self) -> Graph:
        a, b = (graph_input(self.arrays[k].shape, "float32", name=k) for k in self.inputs)
        return Graph([a, b], [taskloom.ops.matmul(a, b)])

    def numpy_call(self) -> Callable[[], Any]:
        a, b = self.arrays["a"], self.arrays["b"]
        c = np.empty(self.out_shape, np.float32)
        return lambda: np.matmul(a, b, out=c)

    def torch_call(self, torch: Any) -> Callable[[], Any]:
        a, b = (torch.from_numpy(self.arrays[k]) for k in self.inputs)
        return lambda: torch.matmul(a, b)

    def onnx_node(self, onnx: Any) -> tuple[Any, list[Any]]:
        return onnx.helper.make_node("MatMul", ["a", "b"], ["y"]), []


class Conv2dProblem:
    """NCHW input ``x`` (the graph input) convolved with a constant OIHW weight, no bias."""

    op = "conv2d"
    form = "N,C,H,W,OC,KH,KW"
    peers = ("torch", "ort")

    def __init__(self, shape: tuple[int, ...], args: argparse.Namespace):
        self.shape = shape
        n, c, h, w, oc, kh, kw = shape
        self.stride, self.pad, self.groups = args.stride, args.pad, args.groups or c
        self.layout: str = args.layout
        self.oh = (h + 2 * self.pad - kh) // self.stride + 1
        self.ow = (w + 2 * self.pad - kw) // self.stride + 1
        self.dims = {"N": n, "C": c, "H": h, "W": w, "OC": oc, "KH": kh, "KW": kw, "OH": self.oh, "OW": self.ow}
        self.out_shape = (n, oc, self.oh, self.ow)
        self.flop = 2 * n * oc * self.oh * self.ow * (c // self.groups) * kh * kw
        self.inputs = ("x",)
        self.arrays: dict[str, np.ndarray] = {}
        if self.check() is None:
            rng = np.random.default_rng(0)
            self.arrays = {"x": rng.standard_normal((n, c, h, w), dtype=np.float32),
                           "w": rng.standard_normal((oc, c // self.groups, kh, kw), dtype=np.float32)}

    def check(self) -> str | None:
        """Why the shape and options make no convolution, or None."""
        n, c, h, w, oc, kh, kw = self.shape
        if c % self.groups or oc % self.groups:
            return f"--groups {self.groups} must divide C={c} and OC={oc} of --shape {_join(self.shape)}"
        if self.oh < 1 or self.ow < 1:
            return (f"the {kh}x{kw} kernel does not fit the {h}x{w} input padded by {self.pad} "
                    f"(--shape {_join(self.shape)})")
        return None

    def reference(self) -> np.ndarray:
        """float64 convolution: one batched matrix product per kernel tap."""
        x, w = self.arrays["x"].astype(np.float64), self.arrays["w"].astype(np.float64)
        n, c, _, _ = x.shape
        oc, cg, kh, kw = w.shape
        g, s, p, oh, ow = self.groups, self.stride, self.pad, self.oh, self.ow
        xg = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p))).reshape(n, g, cg, x.shape[2] + 2 * p, x.shape[3] + 2 * p)
        wg = w.reshape(g, oc // g, cg, kh, kw)
        out = np.zeros((n, g, oc // g, oh * ow))
        for i in range(kh):
            for j in range(kw):
                taps = xg[:, :, :, i:i + s * (oh - 1) + 1:s, j:j + s * (ow - 1) + 1:s]
                out += np.matmul(wg[:, :, :, i, j], taps.reshape(n, g, cg, oh * ow))
        return out.reshape(n, oc, oh, ow)

    def taskloom_inputs(self) -> list[np.ndarray]:
        x = self.arrays["x"]
        return [np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if self.layout == "NHWC" else x]

    def from_taskloom(self, out: np.ndarray) -> np.ndarray:
        return out.transpose(0, 3, 1, 2) if self.layout == "NHWC" else out

    def trace(self) -> Graph:
        (x,) = self.taskloom_inputs()
        w = self.arrays["w"]
        if self.layout == "NHWC":
            w = np.ascontiguousarray(w.transpose(2, 3, 1, 0))
        xi = graph_input(x.shape, "float32", name="x")
        y = taskloom.ops.nn.conv2d(xi, taskloom.asarray(w), stride=self.stride, padding=self.pad,
                                   groups=self.groups, layout=self.layout)
        return Graph([xi], [y])

    def torch_call(self, torch: Any) -> Callable[[], Any]:
        x, w = torch.from_numpy(self.arrays["x"]), torch.from_numpy(self.arrays["w"])
        conv = torch.nn.functional.conv2d
        return lambda: conv(x, w, stride=self.stride, padding=self.pad, groups=self.groups)

    def onnx_node(self, onnx: Any) -> tuple[Any, list[Any]]:
        w = self.arrays["w"]
        node = onnx.helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=list(w.shape[2:]),
                                     pads=[self.pad] * 4, strides=[self.stride] * 2, group=self.groups)
        return node, [onnx.numpy_helper.from_array(w, "w")]


Problem = MatmulProblem | Conv2dProblem
PROBLEMS: dict[str, type[Problem]] = {"matmul": MatmulProblem, "conv2d": Conv2dProblem}


# -- the systems --------------------------------------------------------------------------


def _taskloom_call(problem: Problem, target: Target, tune: int, info: dict[str, Any]) -> Callable[[], Any]:
    """The compiled graph called on the problem's inputs; the compile time goes to ``info``."""
    graph = problem.trace()
    started = time.perf_counter()
    compiled = taskloom.compile(graph, target=target, tune=tune)
    info["compile_s"] = time.perf_counter() - started
    args = problem.taskloom_inputs()
    return lambda: compiled(*args)


def _torch_call(problem: Problem, cores: int, stack: contextlib.ExitStack) -> Callable[[], Any]:
    import torch
    threads = torch.get_num_threads()
    stack.callback(torch.set_num_threads, threads)
    torch.set_num_threads(cores)
    stack.enter_context(torch.inference_mode())  # the whole timed block, not each call
    return problem.torch_call(torch)


def ort_call(problem: Problem, cores: int) -> Callable[[], Any]:
    """A one-node ONNX model in an ORT session. ``sess.run`` takes the numpy inputs without
    copying them on the CPU provider; I/O binding would only save the output allocation."""
    import onnx
    import onnxruntime as ort
    node, initializers = problem.onnx_node(onnx)

    def value(name: str, shape: tuple[int, ...]) -> Any:
        return onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(shape))
    graph = onnx.helper.make_graph([node], f"bench_{problem.op}",
                                   [value(k, problem.arrays[k].shape) for k in problem.inputs],
                                   [value("y", problem.out_shape)], initializer=initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", ONNX_OPSET)],
                                   ir_version=ONNX_IR_VERSION)
    options = ort.SessionOptions()
    options.intra_op_num_threads = cores
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {k: problem.arrays[k] for k in problem.inputs}
    return lambda: session.run(None, feeds)[0]


def _prepare(system: str, setup: Callable[[contextlib.ExitStack], Callable[[], Any]],
             stack: contextlib.ExitStack, reference: np.ndarray,
             convert: Callable[[np.ndarray], np.ndarray] | None = None) -> tuple[dict[str, Any], Callable[[], Any] | None]:
    """A system's row and its call: set up, run once and checked against the reference (its
    output ``convert``-ed to the reference's layout first). A system that is not installed
    or fails has ``error`` filled in and no call."""
    row: dict[str, Any] = {"system": system, "median_ms": None, "gflops": None, "max_abs_diff": None,
                           "error": None, "round_ms": None}
    for module in PEER_MODULES.get(system, ()):
        try:
            importlib.import_module(module)
        except ImportError:
            row["error"] = "not installed"
            return row, None
    try:
        call = setup(stack)
        out = np.asarray(call())
        if convert is not None:
            out = convert(out)
        if out.shape != reference.shape:
            raise TaskloomError(f"output shape {out.shape}, expected {reference.shape}")
        row["max_abs_diff"] = float(np.max(np.abs(out - reference))) if out.size else 0.0
        return row, call
    except Exception as exc:  # a benchmark reports a failing system and goes on with the others
        row["error"] = error_text(exc)
        return row, None


def bench_shape(problem: Problem, peers: tuple[str, ...], target: Target, tune: int, repeats: int,
                rounds: int = 1) -> dict[str, Any]:
    """Measures taskloom and ``peers`` on one problem; the JSON entry of one ``--shape``.

    Every system is set up and checked first, then timed in ``rounds`` rounds of one block
    each (:func:`~taskloom.bench.timing.time_rounds`); a row's ``median_ms`` is the median of
    all its runs and ``round_ms`` the median of each round, to show the spread."""
    reference = problem.reference()
    cores = target.num_cores
    info: dict[str, Any] = {"compile_s": None, "tune": tune, "target": target.key()}
    setups: dict[str, Callable[[contextlib.ExitStack], Callable[[], Any]]] = {
        "taskloom": lambda stack: _taskloom_call(problem, target, tune, info),
        "numpy": lambda stack: problem.numpy_call(),  # type: ignore[union-attr]  (matmul only)
        "torch": lambda stack: _torch_call(problem, cores, stack),
        "ort": lambda stack: ort_call(problem, cores),
    }
    with contextlib.ExitStack() as stack:
        prepared = {name: _prepare(name, setups[name], stack, reference,
                                   problem.from_taskloom if name == "taskloom" else None)
                    for name in ("taskloom", *peers)}
        calls = {name: call for name, (_, call) in prepared.items() if call is not None}
        times = time_rounds(calls, repeats, rounds, WARMUP)
    rows = []
    for name, (row, _) in prepared.items():
        blocks = times.get(name)
        if isinstance(blocks, Exception):
            row["error"] = error_text(blocks)
        elif blocks:
            ms = statistics.median(t for block in blocks for t in block)
            row.update(median_ms=ms, gflops=problem.flop / ms / 1e6,
                       round_ms=[statistics.median(block) for block in blocks])
        rows.append(row)
    return {"shape": list(problem.shape), "dims": problem.dims, "flop": problem.flop, "rows": rows, "taskloom": info}


# -- printing -----------------------------------------------------------------------------


def _join(values: Any) -> str:
    return ",".join(str(v) for v in values)


def error_text(exc: BaseException) -> str:
    """A failing system's ``error``: the exception's type and message."""
    return f"{type(exc).__name__}: {exc}".strip()


def cell(value: float | None, spec: str, width: int) -> str:
    return ("-" if value is None else format(value, spec)).rjust(width)


def format_result(op: str, result: dict[str, Any], repeats: int, rounds: int, cores: int) -> str:
    """The table of one shape: one line per system, then the taskloom compile time. With
    several rounds, ``spread`` is the range of the rounds' medians over the median."""
    dims = " ".join(f"{k}={v}" for k, v in result["dims"].items())
    runs = f"{rounds} rounds of {repeats} runs" if rounds > 1 else f"{repeats} runs"
    lines = [f"{op} {dims}: {result['flop']:,} flop, float32, median of {runs}, "
             f"{cores} core{'s' if cores > 1 else ''}",
             f"  {'system':10s} {'median ms':>11s} {'GFLOP/s':>9s} {'vs taskloom':>11s} {'max abs diff':>12s} "
             f"{'spread':>7s}  error"]
    base = result["rows"][0]["gflops"]
    for r in result["rows"]:
        ratio = r["gflops"] / base if r["gflops"] and base else None
        rounds_ms = r.get("round_ms") or []
        spread = (max(rounds_ms) - min(rounds_ms)) / r["median_ms"] * 100 if len(rounds_ms) > 1 else None
        cells = [cell(r["median_ms"], ".4f", 11), cell(r["gflops"], ".2f", 9),
                 cell(ratio, ".2f", 10) + ("x" if ratio is not None else " "), cell(r["max_abs_diff"], ".2e", 12),
                 cell(spread, ".0f", 6) + ("%" if spread is not None else " ")]
        lines.append(f"  {r['system']:10s} {' '.join(cells)}  {r['error'] or ''}".rstrip())
    t = result["taskloom"]
    compile_s = "failed" if t["compile_s"] is None else f"{t['compile_s']:.2f} s"
    lines.append(f"  taskloom compile: {compile_s} (tune {t['tune']})")
    return "\n".join(lines)


# -- the command --------------------------------------------------------------------------


def target_argument(parser: argparse.ArgumentParser, spec: str | None) -> Target:
    """The target ``--target`` names (None: this machine), or a usage error from ``parser``."""
    try:
        return get_target(spec)
    except TaskloomError as exc:
        parser.error(f"argument --target: {exc}")
        raise  # parser.error exits


def run(args: argparse.Namespace) -> int:
    """``taskloom bench op OP``: measure every ``--shape``, print tables, write ``--json``."""
    parser: argparse.ArgumentParser = args.op_parser
    target = target_argument(parser, args.target)
    if target.kind == "cuda":
        return _run_on_gpu(args)
    if args.dtype != "float32":
        parser.error("argument --dtype: the CPU benchmark runs float32; other dtypes are for --target cuda")
    problems = [PROBLEMS[args.op](shape, args) for shape in args.shape]
    for p in problems:
        if (why := p.check()) is not None:
            parser.error(why)
    peers = PROBLEMS[args.op].peers if args.compare is None else args.compare
    print(f"target: {args.target or 'this machine'} ({target.key()})")
    results = []
    for p in problems:
        results.append(bench_shape(p, peers, target, args.tune, args.repeats, args.rounds))
        print(format_result(args.op, results[-1], args.repeats, args.rounds, target.num_cores), flush=True)
    if args.json is not None:
        op_args = {"batch": args.batch} if args.op == "matmul" else \
            {"stride": args.stride, "pad": args.pad, "groups": args.groups, "layout": args.layout}
        op_args.update(compare=list(peers), tune=args.tune, repeats=args.repeats, rounds=args.rounds,
                       target=args.target)
        record: dict[str, Any] = {"op": args.op, "command": shlex.join(["taskloom", "bench", "op", *args.argv]),
                                  "args": op_args}
        if len(results) == 1:
            record.update(results[0])
        record.update(results=results, machine=machine(), versions=versions())
        write_json(args.json, record)
    return 0


def _run_on_gpu(args: argparse.Namespace) -> int:
    from taskloom.bench.gpu import run_op
    record = run_op(args)
    command = shlex.join(["taskloom", "bench", "op", *args.argv])
    if args.json is not None:
        write_json(args.json, {**record, "command": command, "versions": versions()})
    return 0


def positive_int(text: str) -> int:
    return _int_at_least(text, 1, "a positive integer")


def sizes(text: str) -> list[int]:
    """Comma-separated positive integers, ``1,4,16``."""
    return [positive_int(v) for v in text.split(",")]


def _non_negative(text: str) -> int:
    return _int_at_least(text, 0, "an integer >= 0")


def _int_at_least(text: str, low: int, what: str) -> int:
    """``int(text)`` if at least ``low``; else an argparse error naming ``what`` was expected."""
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def _shape_type(form: str) -> Callable[[str], tuple[int, ...]]:
    """The ``--shape`` parser for ``form`` (e.g. ``"M,N,K"``): that many positive ints."""
    count = form.count(",") + 1

    def shape(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(part) for part in text.split(","))
        except ValueError:
            values = ()
        if len(values) != count or min(values) < 1:
            raise argparse.ArgumentTypeError(f"expected {form}: {count} positive integers separated by "
                                             f"commas, got {text!r}")
        return values
    return shape


def compare_type(op: str, peers: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """The ``--compare`` parser: names among ``peers``, in order, without repeats; ``taskloom``
    (always measured) is dropped and ``none`` is the empty list."""
    def compare(text: str) -> tuple[str, ...]:
        names = [] if text.strip() == "none" else [n.strip() for n in text.split(",") if n.strip()]
        for name in names:
            if name == "numpy" and "numpy" not in peers:
                raise argparse.ArgumentTypeError(f"numpy has no {op}; choose among {', '.join(peers)}")
            if name not in peers and name != "taskloom":
                raise argparse.ArgumentTypeError(f"unknown system {name!r}; choose among {', '.join(peers)} "
                                                 "(comma-separated, or 'none')")
        return tuple(dict.fromkeys(n for n in names if n != "taskloom"))
    return compare


class KeepArgs(argparse._SubParsersAction):
    """Subcommands that keep the words typed after ``taskloom bench op``, for the JSON record."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        namespace.argv = list(values)


def add_op_command(kinds: argparse._SubParsersAction) -> None:
    """Register ``op matmul`` and ``op conv2d`` under ``taskloom bench``."""
    op = kinds.add_parser("op", help="time one operator: taskloom against numpy, torch and ONNX Runtime",
                          description=__doc__.split("\n\n")[0].replace("``", ""))
    ops = op.add_subparsers(dest="op", metavar="OP", required=True, action=KeepArgs)
    for name, problem in PROBLEMS.items():
        sub = ops.add_parser(name, help=f"time {name}", formatter_class=argparse.RawDescriptionHelpFormatter,
                             description=f"Time {name}; taskloom is always measured.", epilog=_EPILOG)
        sub.add_argument("--shape", action="append", required=True, type=_shape_type(problem.form),
                         metavar=problem.form, help="the problem size; repeat to measure several in one run")
        if name == "matmul":
            sub.add_argument("--batch", type=positive_int, default=None, metavar="B",
                             help="batched 3-d operands (B, M, K) @ (B, K, N) (default: 2-d)")
        else:
            sub.add_argument("--stride", type=positive_int, default=1, metavar="S", help="both axes (default 1)")
            sub.add_argument("--pad", type=_non_negative, default=0, metavar="P",
                             help="zeros on every side (default 0)")
            sub.add_argument("--groups", type=lambda t: _int_at_least(t, 0, "a non-negative integer"), default=1,
                             metavar="G", help="channel groups (default 1; 0: depthwise, as many groups as "
                                               "input channels, per shape)")
            sub.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW",
                             help="taskloom's input and output layout (default NCHW, as the peers'; NHWC: "
                                  "as between a model's convolutions, no conversion)")
        sub.add_argument("--compare", type=compare_type(name, problem.peers), default=None,
                         metavar=",".join(problem.peers),
                         help=f"the peers to time, comma-separated, or 'none' (default: {','.join(problem.peers)})")
        sub.add_argument("--tune", type=int, choices=(0, 1, 2), default=0, metavar="LEVEL",
                         help="taskloom.compile's tuning level: 0, 1 or 2 (default 0)")
        sub.add_argument("--repeats", type=positive_int, default=30, metavar="R",
                         help=f"timed runs per system, after {WARMUP} warm-ups (default 30)")
        sub.add_argument("--rounds", type=positive_int, default=3, metavar="N",
                         help="time the systems in N rounds, each system once per round, and take the "
                              "median of all runs: on a shared machine every system then meets the same "
                              "noise (default 3)")
        sub.add_argument("--target", default=None, metavar="SPEC",
                         help="taskloom's target, e.g. 'cpu -isa=avx2' (default: this machine); "
                              "its cores are the threads of torch and ORT")
        sub.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32",
                         help="element type (default float32; others with --target cuda)")
        sub.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON")
        sub.set_defaults(func=run, op_parser=sub)

