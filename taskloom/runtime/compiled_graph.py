"""A compiled graph: one shared library whose launcher runs every kernel, its constants,
and an arena for the intermediates. Calling it is one native call.

Saved files hold native code. Their checksum finds accidental damage, not a deliberate
rewrite: load files from a source you trust, or save and load them with ``key=``.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from taskloom.errors import AllocationError, ArgumentError, LoadError, TaskloomError
from taskloom.runtime import saved_file
from taskloom.runtime.aligned import aligned_empty_at
from taskloom.runtime.device import CpuDevice, pointer_table
from taskloom.runtime.dlpack import array_view
from taskloom.runtime.dlpack import as_torch as as_torch_tensor
from taskloom.runtime.library_file import LoadedLibrary, load_private
from taskloom.runtime.shape_binding import ShapeBinder
from taskloom.runtime.status import Status, raise_failure

ENTRY = "taskloom_graph"
PROFILE_ENTRY = "taskloom_graph_profile"


def _np_dtype(name: str) -> np.dtype:
    return np.dtype(np.bool_ if name == "bool" else name)


def _np_dtype_or_none(name: str) -> np.dtype | None:
    """The numpy dtype named ``name``, or None where numpy has none (bfloat16)."""
    try:
        return _np_dtype(name)
    except TypeError:
        return None


class CompiledGraph:
    """Call it with arrays (numpy, or torch tensors through DLPack) for its inputs; it returns
    its outputs (torch tensors when the inputs were torch tensors)."""

    def __init__(self, lib_path: str | os.PathLike, meta: dict[str, Any], constants: Sequence[np.ndarray],
                 *, library: LoadedLibrary | None = None):
        """``library``: the library already loaded, with its bytes (a saved model's); by default
        the one at ``lib_path`` (for a loaded model, ``lib_path`` is the saved file)."""
        self.lib_path = Path(lib_path)
        self.meta = meta
        self.device = CpuDevice()
        uploaded = [self.device.upload(c) for c in constants]
        self.constants = [u.owner for u in uploaded]
        try:
            self._lib, self._lib_bytes = library or LoadedLibrary(ctypes.CDLL(str(self.lib_path.resolve())),
                                                                  self.lib_path.read_bytes())
            self._entry = getattr(self._lib, ENTRY)
        except (OSError, AttributeError) as e:
            raise LoadError(f"cannot load the compiled graph library {self.lib_path}: {e}") from None
        # the launcher's last argument: the status its kernels' run-time checks report to
        self._status = Status() if meta.get("status") else None
        self._status_arg = () if self._status is None else (ctypes.c_void_p(ctypes.addressof(self._status)),)
        # a dynamic graph binds its symbols per call (and takes the sym and off tables)
        self._binder = ShapeBinder(meta, str(self.lib_path)) if meta.get("dynamic") else None
        self._extra = 3 if self._binder is not None else 0
        self._entry.argtypes = [ctypes.c_void_p] * (4 + len(self._status_arg) + self._extra)
        self._entry.restype = None
        self._w = pointer_table([u.ptr for u in uploaded])
        self._arena = self.device.allocate(max(int(meta["arena_bytes"]), 1), "the arena of its intermediates")
        self._arena_ptr = self._arena.ptr
        self._profile: list[np.ndarray] | None = None  # per-call kernel times while profiling
        self._profile_fn: Any = None  # the launcher's profiling twin, resolved when profiling starts
        self._lock = threading.Lock()  # one arena: calls on one CompiledGraph run one at a time
        self.inputs = meta["inputs"]
        self.outputs = meta["outputs"]
        # what a call checks and allocates, worked out once (a call costs microseconds of Python)
        # (a dynamic graph's shapes are None here: the binder checks them)
        self._in_types = [(_np_dtype_or_none(i["dtype"]), self._static(i["shape"])) for i in self.inputs]
        self._out_types = [(_np_dtype_or_none(o["dtype"]) or o["dtype"], self._static(o["shape"]))
                           for o in self.outputs]
        # the pointer tables and the arena's address, filled in under the lock on each call
        self._in_ptrs = (ctypes.c_void_p * max(len(self.inputs), 1))()
        self._out_ptrs = (ctypes.c_void_p * max(len(self.outputs), 1))()
        self._arena_arg = ctypes.c_void_p(self._arena_ptr)
        self._torch_types: tuple[Any, list[Any], list[Any] | None] | None = None  # on the first torch call

    def _static(self, shape: list[Any]) -> tuple[int, ...] | None:
        return None if self._binder is not None else tuple(shape)

    # ------------------------------------------------------------------ calling
    @property
    def arena_bytes(self) -> int:
        """The peak memory of the intermediates (one arena, reused across calls; a dynamic
        graph's grows to the largest call so far)."""
        return max(int(self.meta["arena_bytes"]), self._arena.nbytes if self._binder is not None else 0)

    @property
    def symbols(self) -> dict[str, tuple[int, int]]:
        """A dynamic graph's symbols and the range of each; empty for static shapes."""
        return dict(self._binder.ranges) if self._binder is not None else {}

    def set_num_threads(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ArgumentError(f"set_num_threads() takes a positive int, got {n!r}")
        self._lib.taskloom_set_num_threads(ctypes.c_int(n))

    def __call__(self, *args: Any) -> Any:
        keep: list[Any] = []  # the inputs' keep-alives, until the native call returns
        ptrs, as_torch, shapes = self._input_pointers(args, keep)
        binding = self._binder.bind(shapes) if self._binder is not None else None
        outs, outptrs = self._new_outputs(as_torch, binding.output_shapes if binding is not None else None)
        with self._lock:
            ins, outp = self._in_ptrs, self._out_ptrs
            ins[:len(ptrs)] = ptrs
            outp[:len(outptrs)] = outptrs
            sizes: tuple[Any, ...] = ()
            if binding is not None:
                self._grow_arena(binding.arena_bytes)
                sizes = (binding.sym, binding.off, binding.var)
            if self._profile is None:
                self._entry(self._w, ins, outp, self._arena_arg, *self._status_arg, *sizes)
            else:
                ms = np.zeros(max(len(self.meta["kernels"]), 1), np.float64)
                self._profile_fn(self._w, ins, outp, self._arena_arg, *self._status_arg, *sizes,
                                 ctypes.c_void_p(ms.ctypes.data))
                self._profile.append(ms)
            if self._status is not None and self._status.check:  # a run-time check failed
                raise_failure(self._status, self._lib, "the compiled graph")
        return self._finish(args, outs, as_torch)

    def _grow_arena(self, nbytes: int) -> None:
        """A dynamic graph's arena, made large enough for this call (under the lock)."""
        if nbytes > self._arena.nbytes:
            self._arena = self.device.allocate(nbytes, "the arena of its intermediates")
            self._arena_arg = ctypes.c_void_p(self._arena.ptr)

    @contextlib.contextmanager
    def profiling(self) -> Iterator[list[dict[str, Any]]]:
        """While inside, every call times each kernel in the native launcher (no Python in the
        numbers); on leaving, the yielded list is filled with one entry per kernel in launch
        order, ``{"name", "ops", "anchor", "schedule", "median_ms", "calls"}``, the median over the
        calls (``anchor``: the op a fused kernel is built around, or its first op).

            with compiled.profiling() as kernels:
                for _ in range(30):
                    compiled(x)
            slowest = max(kernels, key=lambda k: k["median_ms"])
        """
        self._profile_fn = self._profile_entry()  # fail before the calls, not after
        self._profile, result = [], []
        try:
            yield result
        finally:
            runs, self._profile = self._profile, None
            medians = np.median(np.stack(runs), axis=0) if runs else np.zeros(len(self.meta["kernels"]))
            result.extend({"name": k["name"], "ops": k["ops"], "anchor": k.get("anchor", k["ops"][0]),
                           "schedule": k.get("schedule", ""), "median_ms": float(m), "calls": len(runs)}
                          for k, m in zip(self.meta["kernels"], medians))

    def profile(self, *args: Any, repeats: int = 30, warmup: int = 3) -> list[dict[str, Any]]:
        """Each kernel's median time over ``repeats`` calls on ``args`` after ``warmup``
        (see :meth:`profiling`)."""
        if repeats < 1 or warmup < 0:
            raise ArgumentError(f"profile(): repeats ({repeats}) must be at least 1 and warmup ({warmup}) at least 0")
        for _ in range(warmup):
            self(*args)
        with self.profiling() as kernels:
            for _ in range(repeats):
                self(*args)
        return kernels

    def _profile_entry(self) -> Any:
        try:
            fn = getattr(self._lib, PROFILE_ENTRY)
        except AttributeError:
            raise LoadError(f"{self.lib_path} has no profiling entry; compile the model again to profile it") from None
        fn.argtypes, fn.restype = [ctypes.c_void_p] * (5 + len(self._status_arg) + self._extra), None
        return fn

    def _input_pointers(self, args: Sequence[Any], keep: list[Any]) -> tuple[list[int], bool, list[tuple]]:
        """The data pointers of ``args``, checked against the inputs, whether any is a torch
        tensor, and their shapes; what must stay alive while the pointers are used goes to ``keep``. A call on
        small tensors costs microseconds of Python, so the common cases (a C-contiguous numpy
        array or CPU tensor of the right dtype and shape) take a dozen attribute reads; anything
        else takes the general path, which also names what is wrong."""
        if len(args) != len(self.inputs):
            names = ", ".join(i["name"] for i in self.inputs)
            raise ArgumentError(f"the compiled graph takes {len(self.inputs)} input(s) ({names}), got {len(args)}")
        ptrs, as_torch, shapes = [], False, []
        for k, ((dtype, shape), a) in enumerate(zip(self._in_types, args)):
            keep.append(a)
            if type(a) is np.ndarray:
                if a.dtype == dtype and (a.shape == shape or shape is None) and a.flags.c_contiguous:
                    ptrs.append(a.ctypes.data)
                    shapes.append(a.shape)
                    continue
            elif type(a).__module__.startswith("torch"):
                as_torch = True
                torch, in_dtypes, _ = self._torch()
                if (isinstance(a, torch.Tensor) and a.dtype == in_dtypes[k] and (shape is None or a.shape == shape)
                        and a.is_cpu and not a.requires_grad and a.is_contiguous()):
                    ptrs.append(a.data_ptr())
                    shapes.append(tuple(a.shape))
                    continue
            ptr, got = self._input_pointer(self.inputs[k], a, keep, shape is None)
            ptrs.append(ptr)
            shapes.append(got)
        return ptrs, as_torch, shapes

    def _torch(self) -> tuple[Any, list[Any], list[Any] | None]:
        """``(torch, the inputs' torch dtypes, the outputs' or None)``, worked out on the
        first call with a torch tensor; None for the outputs when one has no torch dtype or
        is a copy (those are made as numpy arrays and handed over)."""
        if self._torch_types is None:
            import torch

            def torch_dtype(name: str) -> Any:  # torch names its dtypes as taskloom does
                d = getattr(torch, name, None)
                return d if isinstance(d, torch.dtype) else None
            outs = [torch_dtype(o["dtype"]) for o in self.outputs]
            plain = all(d is not None for d in outs) and not any(o.get("copy_of") is not None for o in self.outputs)
            self._torch_types = (torch, [torch_dtype(i["dtype"]) for i in self.inputs], outs if plain else None)
        return self._torch_types

    def _new_outputs(self, as_torch: bool, shapes: Sequence[tuple[int, ...]] | None = None
                     ) -> tuple[list[Any], list[int]]:
        """Fresh outputs (torch tensors for a torch call, whose allocator aligns to 64 bytes)
        and their data pointers; ``shapes``: a dynamic graph's, for this call."""
        types = self._out_types if shapes is None else [(d, s) for (d, _), s in zip(self._out_types, shapes)]
        torch, _, dtypes = self._torch() if as_torch else (None, None, None)
        if dtypes is not None:
            outs = [torch.empty(shape, dtype=d) for (_, shape), d in zip(types, dtypes)]
            return outs, [o.data_ptr() for o in outs]
        outs, ptrs = [], []
        for k, (dtype, shape) in enumerate(types):
            try:
                o, ptr = aligned_empty_at(shape, dtype)
            except MemoryError:
                raise AllocationError(f"output {k} of shape {shape} ({dtype}) does not fit in memory") from None
            outs.append(o)
            ptrs.append(ptr)
        return outs, ptrs

    def _finish(self, args: Sequence[Any], outs: list[Any], as_torch: bool) -> Any:
        """Fills the outputs that copy an input, a constant or another output; torch in, torch out."""
        for o, spec in zip(outs, self.outputs):
            if spec.get("copy_of") is not None:  # an output that is an input, a constant or another output
                kind, k = spec["copy_of"]
                if kind == "in":
                    src = args[k] if isinstance(args[k], np.ndarray) else np.from_dlpack(args[k])
                else:
                    src = self.constants[k] if kind == "w" else outs[k]
                np.copyto(o, src)
        if as_torch and isinstance(outs[0] if outs else None, np.ndarray):
            outs = [as_torch_tensor(o) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _input_pointer(self, spec: dict[str, Any], a: Any, keep: list, symbolic: bool = False
                       ) -> tuple[int, tuple[int, ...]]:
        """The data pointer and shape of input ``a``, checked (its shape by the binder when
        ``symbolic``)."""
        name, want_dtype, want_shape = spec["name"], spec["dtype"], tuple(spec["shape"])
        try:
            view = array_view(a)
        except ArgumentError as e:
            raise ArgumentError(f"input '{name}': {e}") from None
        except Exception:
            raise ArgumentError(f"input '{name}' must be an array (numpy or torch), got {type(a).__name__}") from None
        keep.append(view.keepalive)
        if view.dtype != want_dtype:
            raise ArgumentError(f"input '{name}' must be {want_dtype}, got {view.dtype}")
        if not symbolic and tuple(view.shape) != want_shape:
            raise ArgumentError(f"input '{name}' must have shape {want_shape}, got {tuple(view.shape)}")
        if not view.c_contiguous:
            raise ArgumentError(f"input '{name}' is not C-contiguous; pass np.ascontiguousarray(x) "
                                "or x.contiguous() (that copies)")
        return view.data, tuple(view.shape)

    # ------------------------------------------------------------------ save / load
    def save(self, path: str | os.PathLike, *, key: str | bytes | None = None) -> None:
        """Writes one file with the library, the metadata and the constants, atomically.

        Its checksum finds accidental damage; ``key`` (str or bytes) signs it instead with an
        HMAC-SHA256, so that only holders of the key can write a file that loads with it.
        """
        specs = [(c.dtype.name, c.shape) for c in self.constants]
        try:
            saved_file.check_library_record(self._lib_bytes, self.meta, specs, f"cannot save {path}",
                                            "compile the model again to save it")
        except LoadError as e:
            raise TaskloomError(str(e)) from None
        saved_file.save_file(path, self.meta, self._lib_bytes, self.constants, key)

    @classmethod
    def load(cls, path: str | os.PathLike, *, key: str | bytes | None = None, device: str | None = None) -> Any:
        """Loads a saved graph (numpy only). Checks the file's checksum (or with ``key``, its
        HMAC), its header against the library's own record, and that this machine can run the
        code, all before loading that code from a place only this process reaches. A graph
        compiled for CUDA comes back as a :class:`~taskloom.runtime.cuda_graph.CudaCompiledGraph`
        on ``device`` ("cuda" or "emulator")."""
        meta, constants, lib = saved_file.open_saved(path, key, load=False)
        if meta["target"].get("kind") == "cuda":
            from taskloom.runtime.cuda_graph import CudaCompiledGraph
            return CudaCompiledGraph.from_saved(meta, constants, lib, device, str(path))
        if device not in (None, "cpu"):
            raise ArgumentError(f"load(): {path} holds a model compiled for the CPU; device={device!r} is for "
                                "models compiled for CUDA")
        return cls(path, meta, constants, library=load_private(lib, str(path)))

    def __repr__(self) -> str:
        ins = ", ".join(f"{i['name']}: {i['dtype']}{i['shape']}" for i in self.inputs)
        return f"<CompiledGraph ({ins}) -> {len(self.outputs)} output(s), {len(self.meta['kernels'])} kernels>"
