"""A graph compiled for a CUDA target, run on the GPU or in the SIMT emulator.

``taskloom.compile(model, target="cuda:sm_90", device=...)`` returns a
:class:`CudaCompiledGraph`. Both devices run the kernels of one nvcc-built library, in the
graph launcher's order, with the same memory plan:

- ``device="cuda"``: one call of the library's ``taskloom_graph`` enqueues every kernel on
  torch's current stream. Constants are copied to the GPU once; the arena of intermediates
  and the status of the index checks live there too. Inputs are CUDA tensors (or anything
  DLPack gives torch; host arrays are copied over), outputs are new CUDA tensors. The call
  waits for the stream only to read the status back.
- ``device="emulator"``: each kernel runs from its lowered IR in the emulator, on numpy
  arrays (the arena is one byte array; each intermediate a view of it at its offset), so a
  model's CUDA kernels are checked on any machine. Outputs are numpy arrays.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from taskloom.backend.build import BuiltCudaLibrary
from taskloom.errors import ArgumentError, LoadError, TaskloomError
from taskloom.runtime import saved_file
from taskloom.runtime.library_file import load_private
from taskloom.ir.dtypes import TensorType, dtype as ir_dtype
from taskloom.runtime.cuda_module import DEVICES, require_gpu
from taskloom.runtime.device import CpuDevice, CudaDevice, pointer_table
from taskloom.runtime.emulator import values
from taskloom.runtime.emulator.launch import evaluate
from taskloom.runtime.shape_binding import Binding, ShapeBinder

ENTRY = "taskloom_graph"
#: the sets of sizes of a dynamic graph whose captured calls are kept (each holds its inputs
#: and outputs on the GPU)
CAPTURED_SIZES = 8


class CudaCompiledGraph:
    """Call it with one array per graph input; it returns the outputs (one, or a tuple)."""

    def __init__(self, built: BuiltCudaLibrary, meta: dict[str, Any], constants: Sequence[np.ndarray],
                 device: str = "cuda", library: Any = None, lib_bytes: bytes | None = None):
        """``built``: the nvcc build (its library, target and lowered kernels); ``library``
        and ``lib_bytes``: that library loaded from memory, and its bytes (a saved model's)."""
        if device not in DEVICES:
            raise TaskloomError(f"device={device!r} is not a CUDA device; use 'cuda' (the GPU) or 'emulator' "
                                "(the SIMT emulator, on the CPU)")
        self.built, self.meta, self.device = built, meta, device
        self.inputs, self.outputs = meta["inputs"], meta["outputs"]
        self.constants = list(constants)
        self._lib_bytes = lib_bytes
        self.source_path = built.source_path
        self._kernels = {f.name: f for f in built.kernels}
        self._lock = threading.Lock()  # one arena: calls run one at a time
        self._gpu: _GpuState | None = _GpuState(self, library) if device == "cuda" else None
        self._binder = ShapeBinder(meta) if "dynamic" in meta else None
        self._arena = _host_arena(int(meta["arena_bytes"])) if device == "emulator" else None
        self.last_reports: list[Any] = []  # the emulator's counters of each kernel of the last call

    def __repr__(self) -> str:
        return f"<CudaCompiledGraph of {len(self.meta['kernels'])} kernels for {self.built.target.key()} on {self.device}>"

    def __call__(self, *args: Any) -> Any:
        if len(args) != len(self.inputs):
            names = ", ".join(i["name"] for i in self.inputs)
            raise ArgumentError(f"the compiled graph takes {len(self.inputs)} inputs ({names}), got {len(args)}")
        binding = self._binder.bind([tuple(np.shape(a)) for a in args]) if self._binder is not None else None
        with self._lock:
            outs = self._run_gpu(args, binding) if self._gpu is not None else self._run_emulator(args, binding)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def output_shapes(self, binding: Binding | None) -> list[tuple[int, ...]]:
        """This call's output shapes: the meta's, or a dynamic graph's for its sizes."""
        return list(binding.output_shapes) if binding is not None else [tuple(o["shape"]) for o in self.outputs]

    def _calls(self, binding: Binding | None) -> list[dict[str, Any]]:
        """The launcher's calls in order, each kernel built in variants as the one ``binding``'s
        sizes chose."""
        return [c["variants"][binding.var[c["choice"]] if binding is not None else 0] if "variants" in c else c
                for c in self.meta["calls"]]

    def save(self, path: str | os.PathLike, *, key: str | bytes | None = None) -> None:
        """One file as :meth:`CompiledGraph.save <taskloom.runtime.CompiledGraph.save>` writes:
        the library nvcc built (kernels, launcher, the record a load checks), the kernels' IR
        for the emulator, and the constants. A machine without a GPU saves what one with a
        GPU loads."""
        lib = self._lib_bytes if self._lib_bytes is not None else self.built.lib_path.read_bytes()
        specs = [(c.dtype.name, c.shape) for c in self.constants]
        try:
            saved_file.check_library_record(lib, self.meta, specs, f"cannot save {path}",
                                            "compile the model again to save it")
        except LoadError as e:
            raise TaskloomError(str(e)) from None
        saved_file.save_file(path, self.meta, lib, self.constants, key)

    @classmethod
    def from_saved(cls, meta: dict[str, Any], constants: list[np.ndarray], lib: bytes, device: str | None,
                   where: str) -> "CudaCompiledGraph":
        """A saved CUDA graph (checked by :func:`~taskloom.runtime.saved_file.open_saved`) on
        ``device``: the GPU, whose architecture must run the file's code, or the emulator."""
        from taskloom.script import parse_source
        from taskloom.target.cuda import CudaTarget
        target = CudaTarget.from_dict(meta["target"])
        device = device or "cuda"
        library = None
        if device == "cuda":
            require_gpu()
            here = CudaTarget.from_string("cuda")
            if not target.runs_on(here):
                raise LoadError(f"{where} was built for {target.arch}, which this GPU ({here.name}, {here.arch}) "
                                "cannot run; compile the model again for it")
            library = load_private(lib, where).handle
        try:
            kernels = tuple(parse_source(text) for text in meta["kernel_ir"])
        except TaskloomError as e:
            raise LoadError(f"{where}: a kernel's IR does not parse ({e}); the file is damaged") from None
        built = BuiltCudaLibrary(Path(where), Path(where), [], target, {}, kernels)
        return cls(built, meta, constants, device, library, lib)

    # ------------------------------------------------------------------ the emulator
    def _run_emulator(self, args: Sequence[Any], binding: Binding | None) -> list[np.ndarray]:
        from taskloom.runtime.emulator import run_kernel
        tables = self._emulator_tables(args, binding)
        self.last_reports = []
        for call in self._calls(binding):
            fn = self._kernels[call["kernel"]]
            sizes = call_sizes(call, fn, binding)
            args_ = [self._emulator_arg(tables, kind, index, p, fn, sizes, binding)
                     for (kind, index), p in zip(call["args"], fn.params)]
            self.last_reports.append(run_kernel(fn, args_))
        outs = self._copies(tables)
        if any(hasattr(a, "detach") for a in args):  # torch tensors in, torch tensors out
            import torch
            outs = [torch.from_numpy(o).view(torch.bfloat16) if spec["dtype"] == "bfloat16" else torch.from_numpy(o)
                    for o, spec in zip(outs, self.outputs)]
        return outs

    def _emulator_tables(self, args: Sequence[Any], binding: Binding | None) -> dict[str, list[np.ndarray]]:
        """A call's tables in the emulator (constants, its inputs on the host, new outputs),
        the host arena grown to what its sizes need."""
        if binding is not None and binding.arena_bytes + 64 > len(self._arena):
            self._arena = _host_arena(binding.arena_bytes)
        return {"w": self.constants, "in": [self._host_input(k, a, binding) for k, a in enumerate(args)],
                "out": [np.empty(shape, _numpy(o["dtype"])) for o, shape in zip(self.outputs,
                                                                               self.output_shapes(binding))]}

    def _emulator_arg(self, tables: dict[str, list[np.ndarray]], kind: str, index: int, p: Any, fn: Any,
                      sizes: dict[str, Any], binding: Binding | None) -> Any:
        if kind == "sym":
            return int(binding.sym[index])  # type: ignore[union-attr]
        if kind not in ("arena", "slot"):
            return tables[kind][index]
        start, nbytes = place(kind, index, p, fn, sizes, binding)
        assert self._arena is not None
        return self._arena[start:start + nbytes].view(_numpy(p.type.dtype.name))

    def _host_input(self, k: int, a: Any, binding: Binding | None) -> np.ndarray:
        spec = self.inputs[k]
        from taskloom.runtime.emulator.launch import host_array
        arr = host_array(a.detach().cpu()) if hasattr(a, "detach") else np.asarray(a)
        check_input(spec, arr.dtype == _numpy(spec["dtype"]), str(arr.dtype), arr.shape, binding)
        return np.ascontiguousarray(arr)

    def _copies(self, tables: dict[str, list[Any]]) -> list[Any]:
        """The outputs, with those that repeat an input, a constant or an earlier output copied."""
        outs = tables["out"]
        for k, spec in enumerate(self.outputs):
            if spec["copy_of"] is not None:
                kind, index = spec["copy_of"]
                source = tables[kind][index]
                outs[k] = source.clone() if hasattr(source, "clone") else np.array(source)
        return outs

    # ------------------------------------------------------------------ the GPU
    def _run_gpu(self, args: Sequence[Any], binding: Binding | None) -> list[Any]:
        gpu = self._gpu
        assert gpu is not None
        ins = [gpu.device_input(spec, a, binding) for spec, a in zip(self.inputs, args)]
        outs = gpu.run(ins, [(o["dtype"], shape) for o, shape in zip(self.outputs, self.output_shapes(binding))],
                       binding)
        return self._copies({"w": gpu.constants, "in": ins, "out": outs})


def check_input(spec: dict[str, Any], dtype_ok: bool, dtype: str, shape: Sequence[int],
                binding: Binding | None) -> None:
    """An :class:`ArgumentError` where an input's type (``dtype``, ``dtype_ok`` where it is the
    graph's) or shape is not the graph's (a dynamic graph's shapes were checked as its
    symbols were bound)."""
    if not dtype_ok or (binding is None and tuple(shape) != tuple(spec["shape"])):
        want = tuple(spec["shape"]) if binding is None else "(" + ", ".join(map(str, spec["shape"])) + ")"
        raise ArgumentError(f"input '{spec['name']}' must be {spec['dtype']} of shape {want}, "
                            f"got {dtype} of shape {tuple(shape)}")


def call_sizes(call: dict[str, Any], fn: Any, binding: Binding | None) -> dict[str, Any]:
    """The sizes a call passes ``fn`` (a dynamic graph's symbols), as the emulator's values."""
    return {p.name: values.constant(int(binding.sym[index]), p.type)  # type: ignore[union-attr]
            for (kind, index), p in zip(call["args"], fn.params) if kind == "sym"}


def place(kind: str, index: int, p: Any, fn: Any, sizes: dict[str, Any], binding: Binding | None) -> tuple[int, int]:
    """Where an intermediate lies in the arena: its first byte and its bytes, at an offset
    planned once (``arena``) or per call (``slot``)."""
    t: TensorType = p.type
    count = int(np.prod([evaluate(fn, d, sizes, f"shape of '{p.name}'") for d in t.shape]))
    start = index if kind == "arena" else int(binding.off[index])  # type: ignore[union-attr]
    return start, count * t.dtype.nbytes


def _host_arena(nbytes: int) -> np.ndarray:
    """The emulator's arena: bytes for the intermediates, and some slack."""
    return CpuDevice().allocate(nbytes + 64, "the arena of its intermediates").owner


class _GpuState:
    """What a graph keeps on the GPU: its constants, arena and status, and the loaded library."""

    def __init__(self, graph: CudaCompiledGraph, library: Any = None):
        import ctypes
        require_gpu()
        from taskloom.runtime.cuda_module import CudaModule
        self.device = CudaDevice()
        self.torch, self.ctypes = self.device.torch, ctypes
        self.module = CudaModule(graph.built, "cuda", library)
        uploaded = [self.device.upload(c) for c in graph.constants]
        self.constants = [u.owner for u in uploaded]
        self.arena = self.device.allocate(int(graph.meta["arena_bytes"]), "the arena of its intermediates")
        self.entry = getattr(self.module.library(), ENTRY)
        self.entry.restype = ctypes.c_int
        self.entry.argtypes = [ctypes.c_void_p] * (9 if "dynamic" in graph.meta else 6)
        self._w = pointer_table([u.ptr for u in uploaded])
        self.checks = any(fn.reports_status for fn in graph.built.kernels)
        asked = os.environ.get("TASKLOOM_CUDA_GRAPHS", "")  # "0": never; "1": always; else where it pays
        self.graphs_wanted = asked == "1" or (asked != "0" and replay_pays(graph.meta))
        # a captured call per set of sizes (a static graph has one): a replay bakes in its
        # grids, offsets and buffers
        self.replays: OrderedDict[tuple[int, ...], _Replay] = OrderedDict()

    def torch_dtype(self, name: str) -> Any:
        return getattr(self.torch, name if name != "bool" else "bool")

    def empty_outputs(self, specs: list[tuple[str, tuple[int, ...]]]) -> list[Any]:
        """A new GPU tensor for each (dtype, shape) in ``specs``."""
        return [self.torch.empty(shape, dtype=self.torch_dtype(dtype), device="cuda") for dtype, shape in specs]

    def device_input(self, spec: dict[str, Any], a: Any, binding: Binding | None) -> Any:
        torch = self.torch
        t = a if isinstance(a, torch.Tensor) else torch.from_dlpack(a) if hasattr(a, "__dlpack__") else \
            torch.from_numpy(np.asarray(a))
        dtype = str(t.dtype).replace("torch.", "")
        check_input(spec, dtype == spec["dtype"], dtype, t.shape, binding)
        t = t.to("cuda").contiguous()
        return t if t.data_ptr() % 16 == 0 else t.clone()  # cp.async and vector loads move 16 aligned bytes

    def run(self, ins: list[Any], specs: list[tuple[str, tuple[int, ...]]], binding: Binding | None) -> list[Any]:
        """The outputs (new tensors) of one call: by replaying the call captured at these
        sizes where that works (see :class:`_Replay`), else by launching each kernel."""
        self.fit_arena(binding)
        key = binding.values if binding is not None else ()
        replay = self.replays.get(key)
        if replay is None and self.graphs_wanted:
            replay = _Replay.capture(self, ins, specs, binding)
            self.graphs_wanted = replay is not None
            if replay is not None:
                self.replays[key] = replay
                if len(self.replays) > CAPTURED_SIZES:
                    self.replays.popitem(last=False)
        if replay is not None:
            self.replays.move_to_end(key)
            return replay(ins)
        outs = self.empty_outputs(specs)
        self.launch(ins, outs, binding)
        return outs

    def fit_arena(self, binding: Binding | None) -> None:
        """The arena grown to what a dynamic graph's call at ``binding``'s sizes needs."""
        if binding is not None and binding.arena_bytes > self.arena.nbytes:
            self.torch.cuda.current_stream().synchronize()  # the old arena may still be in use
            self.arena = self.device.allocate(binding.arena_bytes, "the arena of its intermediates")
            self.replays.clear()  # they point into the old arena

    def launch(self, ins: list[Any], outs: list[Any], binding: Binding | None, check: bool = True) -> None:
        """Enqueues every kernel on the current stream; with ``check``, waits for them where a
        kernel checks its indices, and raises the first failed check."""
        (stream,) = self.device.entry_args()
        ctypes = self.ctypes
        tables = [] if binding is None else [ctypes.cast(t, ctypes.c_void_p) for t in (binding.sym, binding.off,
                                                                                        binding.var)]
        code = self.entry(self._w, pointer_table([t.data_ptr() for t in ins]), pointer_table([t.data_ptr() for t in outs]),
                          ctypes.c_void_p(self.arena.ptr), self.module.device_status(), *tables, stream)
        if code != 0:
            raise TaskloomError(f"the compiled graph failed to launch: CUDA error {code} (cudaGetErrorName gives its name)")
        if check:
            self.take_status(stream)

    def take_status(self, stream: Any) -> None:
        if self.checks:  # no kernel checks an index: nothing to wait for
            self.module.take_status("the compiled graph", stream)


class _Replay:
    """The whole call captured once as a CUDA graph and replayed: at batch 1 a model's time
    is mostly kernel launches, and a replay launches them all at once. The graph reads its
    inputs from, and writes its outputs to, buffers of its own: a call copies the inputs in
    and the outputs out, so that no result is overwritten by the next call.

    Its first replay is checked against launching each kernel; where capture fails or the
    two differ, the graph runs kernel by kernel from then on, with a warning
    (``TASKLOOM_CUDA_GRAPHS=0`` asks for that from the start)."""

    def __init__(self, gpu: "_GpuState", ins: list[Any], outs: list[Any], graph: Any):
        self.gpu, self.ins, self.outs, self.graph = gpu, ins, outs, graph

    @classmethod
    def capture(cls, gpu: "_GpuState", ins: list[Any], specs: list[tuple[str, tuple[int, ...]]],
                binding: Binding | None) -> "_Replay | None":
        torch = gpu.torch
        try:
            with torch.inference_mode(False):  # buffers a later call may write, in inference mode or not
                static_ins = [t.clone() for t in ins]
                static_outs = gpu.empty_outputs(specs)
            side = torch.cuda.Stream()  # warm up off the capturing stream, as torch asks
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                gpu.launch(static_ins, static_outs, binding)
                direct = [t.clone() for t in static_outs]
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                gpu.launch(static_ins, static_outs, binding, check=False)
            replay = cls(gpu, static_ins, static_outs, graph)
            replayed = replay(ins)
        except Exception as e:  # an index check fails the same way without the graph: let it
            from taskloom.errors import IndexOutOfRange
            if isinstance(e, IndexOutOfRange):
                raise
            _warn(f"capturing it as a CUDA graph failed ({type(e).__name__}: {e})")
            return None
        if not all(_same(torch, a, b) for a, b in zip(replayed, direct)):
            _warn("its CUDA graph's first replay differed from launching each kernel")
            return None
        return replay

    def __call__(self, ins: list[Any]) -> list[Any]:
        for static, given in zip(self.ins, ins):
            static.copy_(given)
        self.graph.replay()
        self.gpu.take_status(self.gpu.device.stream())
        return [t.clone() for t in self.outs]


#: What a replay saves and costs on the host of an H100 (bench/results/2026-11-28-h100-second-run.md):
#: each kernel launched by itself about LAUNCH_US; a replay copies every input in and every
#: output out, COPY_US each and their bytes at COPY_GBS (a single 4096³ product: 0.29 ms a
#: call replayed, 0.22 ms launched)
LAUNCH_US, COPY_US, COPY_GBS = 4.0, 5.0, 1500.0


def replay_pays(meta: dict[str, Any]) -> bool:
    """Whether replaying a captured graph beats launching its kernels one by one: many
    launches and small inputs and outputs (a model at batch 1), not one large product."""
    specs = meta["inputs"] + meta["outputs"]
    if any(not isinstance(d, int) for s in specs for d in s["shape"]):
        return True  # a dynamic graph's sizes vary by call; its launches are as many
    nbytes = sum(int(np.prod(s["shape"])) * ir_dtype(s["dtype"]).nbytes for s in specs)
    return len(meta["calls"]) * LAUNCH_US > len(specs) * COPY_US + nbytes / (COPY_GBS * 1e3)


def _same(torch: Any, a: Any, b: Any) -> bool:
    """Equal, up to the order in which atomic additions landed."""
    return bool(torch.equal(a, b) or (a.is_floating_point() and torch.allclose(a, b, 1e-4, 1e-6, equal_nan=True)))


def _warn(what: str) -> None:
    import warnings
    warnings.warn(f"taskloom: {what}; the compiled graph launches its kernels one by one instead", RuntimeWarning,
                  stacklevel=4)


def _numpy(name: str) -> np.dtype:
    """The numpy storage of a taskloom dtype (bfloat16 as its 16 bits)."""
    from taskloom.runtime.emulator.values import storage
    return storage(ir_dtype(name))


__all__ = ["CudaCompiledGraph"]
