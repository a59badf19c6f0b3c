"""CUDA kernels built by taskloom, called on a GPU or in the SIMT emulator.

``taskloom.build(kernels, target="cuda:sm_90", device=...)`` returns a :class:`CudaModule`:

- ``device="cuda"`` launches the built library's ``launch_<kernel>`` on the current CUDA
  stream with device pointers (torch CUDA tensors, CuPy arrays: anything with
  ``__cuda_array_interface__`` or a CUDA ``data_ptr()``), after checking the launch against
  the target's limits with ptxas's report;
- ``device="emulator"`` runs the very kernels nvcc built, from their lowered IR, on the CPU
  (:mod:`taskloom.runtime.emulator`), on numpy arrays or CPU tensors, written in place, and
  keeps the emulator's counters (bank conflicts, sectors, instructions) of the last call.

Arguments are checked against each kernel's signature (dtype, shape with its symbols); as
for CPU kernels, scalar parameters that name a whole dimension may be left out.
"""
from __future__ import annotations

import ctypes
from typing import Any, Mapping, Sequence

import numpy as np

from taskloom.backend.build import BuiltCudaLibrary
from taskloom.backend.nvcc import check_resources
from taskloom.errors import ArgumentError, TargetError
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.functor import collect
from taskloom.runtime.signature import SCALAR_CTYPES, Param, parse_signature
from taskloom.runtime.status import Status, raise_failure

DEVICES = ("cuda", "emulator")


class CudaKernel:
    """One kernel of a :class:`CudaModule`; call it with its arguments in parameter order."""

    def __init__(self, module: "CudaModule", signature: Mapping[str, Any], lowered: S.Function):
        self.module, self.lowered = module, lowered
        sig = parse_signature(signature)
        self.name, self.params, self.symbol = sig.name, sig.params, signature["symbol"]
        self.checks = bool(signature.get("status"))  # it takes a status last, for its index checks
        self.last_report: Any = None  # the emulator's counters of the last call
        self.alignment = wide_access_alignment(lowered)

    def __repr__(self) -> str:
        return f"<CudaKernel {self.name} on {self.module.device}>"

    def __call__(self, *args: Any) -> Any:
        values = self._bind(args)
        if self.module.device == "emulator":
            from taskloom.runtime.emulator import run_kernel
            self.last_report = run_kernel(self.lowered, values)
            return self.last_report
        return self._launch(values)

    # ------------------------------------------------------------------ arguments
    def _bind(self, args: Sequence[Any]) -> list[Any]:
        """The arguments in parameter order, scalars read off the shapes when left out."""
        buffers = [p for p in self.params if p.kind != "scalar"]
        if len(args) == len(buffers) and len(buffers) != len(self.params):
            given = dict(zip((p.name for p in buffers), args))
            env = self._symbols(given)
            args = [env[p.name] if p.kind == "scalar" else given[p.name] for p in self.params]
        if len(args) != len(self.params):
            names = ", ".join(p.name for p in self.params)
            raise ArgumentError(f"kernel '{self.name}' takes {len(self.params)} arguments ({names}), got {len(args)}")
        env = {p.name: int(a) for p, a in zip(self.params, args) if p.kind == "scalar" and p.dtype.startswith("int")}
        for p, a in zip(self.params, args):
            if p.kind != "scalar":
                self._check_buffer(p, a, env)
        return list(args)

    def _symbols(self, given: Mapping[str, Any]) -> dict[str, int]:
        env: dict[str, int] = {}
        for p in self.params:
            if p.kind == "tensor":
                for d, size in zip(p.shape, _shape(given[p.name])):
                    if isinstance(d, str):
                        env.setdefault(d, int(size))
        missing = [p.name for p in self.params if p.kind == "scalar" and p.name not in env]
        if missing:
            raise ArgumentError(f"kernel '{self.name}': pass every argument; {', '.join(missing)} "
                                "cannot be read off a tensor's shape")
        return env

    def _check_buffer(self, p: Param, a: Any, env: Mapping[str, int]) -> None:
        dtype = _dtype_name(a)
        if dtype != p.dtype:
            raise ArgumentError(f"kernel '{self.name}': argument '{p.name}' must be {p.dtype}, got {dtype}")
        if p.kind == "tensor":
            want = tuple(d if isinstance(d, int) else env[d] if isinstance(d, str) else d.evaluate(env)
                         for d in p.shape)
            if tuple(_shape(a)) != want:
                raise ArgumentError(f"kernel '{self.name}': argument '{p.name}' must have shape {want}, "
                                    f"got {tuple(_shape(a))}")

    # ------------------------------------------------------------------ the device
    def _launch(self, values: list[Any]) -> None:
        grid, block, dynamic = gpu.launch_dims(self.lowered)
        env = {p.name: v for p, v in zip(self.params, values) if p.kind == "scalar"}
        threads = int(np.prod([_evaluate(b, env) for b in block]))
        check_resources(self.name, self.module.built.resources[self.name], self.module.target, threads,
                        _evaluate(dynamic, env))
        function = self.module.launcher(self.symbol)
        argv = [_device_pointer(self.name, p, v, self.alignment.get(p.name, 1)) if p.kind != "scalar" else _scalar(p, v)
                for p, v in zip(self.params, values)]
        stream = ctypes.c_void_p(_current_stream())
        status = [self.module.device_status()] if self.checks else []
        _cuda_call(self.name, "launch", function(*argv, *status, stream))
        if self.checks:  # waits for the kernel: an index check may have failed
            self.module.take_status(self.name, stream)


class CudaModule:
    """The kernels of one built CUDA library, on the GPU or in the emulator."""

    def __init__(self, built: BuiltCudaLibrary, device: str = "cuda", library: ctypes.CDLL | None = None):
        """``library``: the built library already loaded (a saved model's, from memory)."""
        if device not in DEVICES:
            raise TargetError(f"device={device!r} is not a CUDA device; use 'cuda' (the GPU) or 'emulator' "
                              "(the SIMT emulator, on the CPU)")
        if device == "cuda":
            require_gpu()
        self.built, self.target, self.device = built, built.target, device
        self.source_path = built.source_path
        self._library: ctypes.CDLL | None = library
        self._device_status: ctypes.c_void_p | None = None
        self.kernels = {sig["name"]: CudaKernel(self, sig, fn) for sig, fn in zip(built.signatures, built.kernels)}

    def __getitem__(self, name: str) -> CudaKernel:
        if name not in self.kernels:
            raise KeyError(f"no kernel {name!r} in this module; it has {', '.join(self.kernels)}")
        return self.kernels[name]

    def __repr__(self) -> str:
        return f"<CudaModule {', '.join(self.kernels)} for {self.target.key()} on {self.device}>"

    def library(self) -> ctypes.CDLL:
        """The built library, loaded on first use."""
        if self._library is None:
            self._library = ctypes.CDLL(str(self.built.lib_path))
        return self._library

    def launcher(self, symbol: str) -> Any:
        """The built library's ``launch_<symbol>``."""
        function = getattr(self.library(), f"launch_{symbol}")
        function.restype = ctypes.c_int
        return function

    def device_status(self) -> ctypes.c_void_p:
        """The status in device memory that this module's index checks report to (made once)."""
        if self._device_status is None:
            pointer = ctypes.c_void_p()
            _cuda_call("taskloom_status_new", "allocate a status", self.library().taskloom_status_new(ctypes.byref(pointer)))
            self._device_status = pointer
        return self._device_status

    def take_status(self, kernel: str, stream: ctypes.c_void_p) -> None:
        """Waits for ``stream`` and raises the :class:`IndexOutOfRange` of a failed check."""
        host = Status()
        _cuda_call(kernel, "read its status", self.library().taskloom_status_take(self.device_status(),
                                                                                 ctypes.byref(host), stream))
        if host.check:
            raise_failure(host, self.library(), f"kernel '{kernel}' on the GPU")


def require_gpu() -> None:
    """A :class:`TargetError` unless this machine has an NVIDIA GPU with its driver."""
    from taskloom.target.cuda import _read_device
    if _read_device(0) is None:
        raise TargetError("device='cuda' needs an NVIDIA GPU with its driver, and none was found; "
                          "pass device='emulator' to run on the CPU in taskloom's SIMT emulator")


def _shape(a: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in getattr(a, "shape", ()))


def _dtype_name(a: Any) -> str:
    dtype = getattr(a, "dtype", None)
    name = str(dtype).replace("torch.", "")
    return {"float": "float32", "half": "float16", "double": "float64", "long": "int64", "int": "int32"}.get(name, name)


def _evaluate(e: Any, env: Mapping[str, Any]) -> int:
    from taskloom.ir import expr as E
    from taskloom.ir.functor import substitute
    from taskloom.ir.arith import simplify_expr
    value = simplify_expr(substitute(e, {v: E.as_expr(int(env[v.name]), v.type) for v in E.free_vars(e)}))
    if not isinstance(value, E.Constant):
        raise ArgumentError(f"a launch extent {e!r} does not evaluate to a number")
    return int(value.value)


def wide_access_alignment(fn: S.Function) -> dict[str, int]:
    """Per parameter, the widest access the kernel makes to it at once (``cp.async`` and
    ``copy_vector`` move up to 16 bytes): its address must be a multiple of that."""
    params = {p.name for p in fn.params}
    out: dict[str, int] = {}
    for s in collect(fn.body, (gpu.CpAsync, gpu.VectorCopy)):
        for ref in (s.dst, s.src):  # type: ignore[attr-defined]
            name = getattr(ref.tensor, "name", None)
            if name in params:
                out[name] = max(out.get(name, 1), s.nbytes)  # type: ignore[attr-defined]
    return out


def _device_pointer(kernel: str, p: Param, a: Any, alignment: int = 1) -> ctypes.c_void_p:
    interface = getattr(a, "__cuda_array_interface__", None)
    if interface is not None:
        return _aligned(kernel, p, int(interface["data"][0]), alignment)
    if getattr(a, "is_cuda", False):
        if not a.is_contiguous():
            raise ArgumentError(f"kernel '{kernel}': argument '{p.name}' is not contiguous; pass x.contiguous()")
        return _aligned(kernel, p, a.data_ptr(), alignment)
    raise ArgumentError(f"kernel '{kernel}': argument '{p.name}' must be in GPU memory (a CUDA torch tensor or "
                        f"a CuPy array), got {type(a).__name__}; use device='emulator' for numpy arrays")


def _aligned(kernel: str, p: Param, address: int, alignment: int) -> ctypes.c_void_p:
    if address % alignment:
        raise ArgumentError(f"kernel '{kernel}': argument '{p.name}' starts at an address that is not a multiple "
                            f"of {alignment} bytes, and the kernel accesses it {alignment} bytes at a time; "
                            "pass a copy (x.clone()) or a tensor that starts its own storage")
    return ctypes.c_void_p(address)


def _cuda_call(kernel: str, what: str, code: int) -> None:
    if code != 0:
        raise ArgumentError(f"kernel '{kernel}' failed to {what}: CUDA error {code} (cudaGetErrorName gives its name)")


def _scalar(p: Param, v: Any) -> Any:
    return SCALAR_CTYPES[p.dtype](v)


def _current_stream() -> int:
    """torch's current CUDA stream when torch is loaded, else the default stream."""
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return int(torch.cuda.current_stream().cuda_stream)
    return 0


__all__ = ["CudaKernel", "CudaModule", "DEVICES", "require_gpu"]
