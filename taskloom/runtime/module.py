"""Loading a built library and calling its kernels with arrays, checked, without copies.

A built library exports ``void <kernel>(<params>)`` per kernel plus
``taskloom_set_num_threads`` / ``taskloom_get_num_threads``; beside it the build records each
kernel's signature (see :mod:`taskloom.runtime.signature`). :func:`load_module` reads both and
returns a :class:`Module` of callable :class:`Kernel` objects.

A kernel trusts its pointers completely, so every call checks what C cannot: dtype, rank,
each dimension against its int or symbol, C-contiguity, alignment, writability, scalar
ranges. Everything that does not depend on the arguments is worked out once, at load.
What only the data can show -- an index out of its table -- the kernel checks itself: a
signature with ``"status": true`` takes a status last, which the call passes and reads
(:mod:`taskloom.runtime.status`).
"""
from __future__ import annotations

import copy
import ctypes
import math
import operator
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from taskloom.errors import ArgumentError, LoadError
from taskloom.runtime.dlpack import DTYPE_NAMES, ITEMSIZE, ArrayView, array_view, describe_value
from taskloom.runtime.signature import (INT_RANGES, SCALAR_CTYPES, Param, ShapeExpr, Signature,
                                        parse_signature)
from taskloom.runtime.status import raise_failure, thread_status

SET_THREADS_SYMBOL = "taskloom_set_num_threads"
GET_THREADS_SYMBOL = "taskloom_get_num_threads"
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT64_MAX = float(np.finfo(np.float64).max)
_NUMPY_DTYPES = {name: np.dtype(name) for name in DTYPE_NAMES if name != "bfloat16"}
_NO_DTYPE = np.dtype(object)  # no kernel takes it, so a bfloat16 parameter never takes the fast path


@dataclass(frozen=True)
class _BufferPlan:
    """What a call checks for one tensor or pointer parameter, split by kind of dimension."""

    param: Param
    itemsize: int
    np_dtype: np.dtype  # what a numpy array must have to take the fast path
    ndim: int | None  # None for a pointer: any rank
    const_dims: tuple[tuple[int, int], ...]
    symbol_dims: tuple[tuple[int, str], ...]
    expr_dims: tuple[tuple[int, ShapeExpr], ...]


class Kernel:
    """One kernel of a loaded :class:`Module`; call it with its arguments in C order.

    Pass every parameter, or only the tensor and pointer parameters when each scalar
    parameter is a symbol naming a whole dimension of some tensor: its value is then read
    off that tensor's shape. Arrays are numpy arrays or DLPack-capable CPU tensors (torch);
    they are used in place, never copied. Wrong arguments raise :class:`ArgumentError`.
    """

    def __init__(self, signature: Signature, function: Any, raw_signature: Mapping[str, Any],
                 library: str, handle: Any = None):
        """``handle``: the loaded library, where a kernel with run-time checks (its signature
        says ``status``) finds the text of a failed check."""
        self.name = signature.name
        self.params: tuple[Param, ...] = signature.params
        self.library = library
        self._signature = copy.deepcopy(dict(raw_signature))
        self._handle = handle
        self._status = bool(raw_signature.get("status"))  # the status is the last argument
        function.restype = None
        function.argtypes = [SCALAR_CTYPES[p.dtype] if p.kind == "scalar" else ctypes.c_void_p
                             for p in self.params] + ([ctypes.c_void_p] if self._status else [])
        self._function = function

        self._nparams = len(self.params)
        self._scalars: tuple[tuple[Param, Callable[[Kernel, Param, Any], Any]], ...] = tuple(
            (p, _CONVERTERS[_scalar_class(p.dtype)]) for p in self.params if p.kind == "scalar")
        self._buffers = tuple(_plan(p) for p in self.params if p.is_buffer)
        self._nbuffers = len(self._buffers)
        self._buffer_indices = tuple(b.param.index for b in self._buffers)
        # (position among the buffers, plan) of each buffer with expression dimensions
        self._with_exprs = tuple((k, b) for k, b in enumerate(self._buffers) if b.expr_dims)
        used = {name for b in self._buffers for _, name in b.symbol_dims}
        used |= {name for _, b in self._with_exprs for _, e in b.expr_dims for name in e.names}
        # Symbols: integer scalars some shape reads; they must not be negative.
        self._symbols = tuple(p.name for p, _ in self._scalars if p.name in used)
        whole_dims = {name for b in self._buffers for _, name in b.symbol_dims}
        self._not_inferable = tuple(p.name for p, _ in self._scalars if p.name not in whole_dims)

    @property
    def signature(self) -> dict[str, Any]:
        """The recorded signature this kernel was loaded with (a copy)."""
        return copy.deepcopy(self._signature)

    def __repr__(self) -> str:
        return f"<Kernel {self.name}({', '.join(p.describe() for p in self.params)})>"

    def __call__(self, *args: Any) -> None:
        """Run the kernel on ``args``; outputs are written into the arrays given for them."""
        nargs = len(args)
        cargs: list[Any] = [None] * self._nparams
        env: dict[str, int] = {}
        origins: dict[str, tuple[str, int]] | None = None
        if nargs == self._nparams:
            for p, convert in self._scalars:
                value = convert(self, p, args[p.index])
                cargs[p.index] = value
                if p.dtype in INT_RANGES:
                    env[p.name] = value
            for name in self._symbols:
                if env[name] < 0:
                    raise self._error(name, f"expected a non-negative size, got {env[name]}")
            buffers: Sequence[Any] = [args[i] for i in self._buffer_indices]
        elif nargs == self._nbuffers and not self._not_inferable:
            origins = {}
            buffers = args
        else:
            raise self._count_error(nargs)

        shapes: list[tuple[int, ...]] = []
        owners: list[Any] = []  # keeps DLPack capsules alive through the call
        for plan, arg in zip(self._buffers, buffers):
            # Fast path: a numpy array that passes every check at once. Anything else
            # takes the general path, which also words the error.
            if type(arg) is np.ndarray and arg.dtype == plan.np_dtype:
                flags = arg.flags
                if (flags.c_contiguous and flags.aligned and (flags.writeable or not plan.param.written)
                        and (plan.ndim is None or arg.ndim == plan.ndim)):
                    shape = arg.shape
                    for i, value in plan.const_dims:
                        if shape[i] != value:
                            raise self._dim_error(plan.param, i, shape, str(value))
                    data = arg.ctypes.data
                else:
                    view = self._check_buffer(plan, arg)
                    data, shape = view.data, view.shape
            else:
                view = self._check_buffer(plan, arg)
                data, shape = view.data, view.shape
                owners.append(view.keepalive)
            for i, name in plan.symbol_dims:
                have = env.get(name)
                if have is None:  # only when inferring: the first tensor to show it binds it
                    env[name] = shape[i]
                    origins[name] = (plan.param.name, i)  # type: ignore[index]
                elif have != shape[i]:
                    raise self._dim_error(plan.param, i, shape,
                                          f"{name}={have} from {self._origin(name, origins)}")
            cargs[plan.param.index] = data
            shapes.append(shape)

        for position, plan in self._with_exprs:
            shape = shapes[position]
            for i, expr in plan.expr_dims:
                try:
                    value = expr.evaluate(env)
                except ZeroDivisionError:
                    raise self._error(plan.param.name, f"dimension {i} is {expr.text}, which divides by "
                                      f"zero with {self._bindings(expr, env, origins)}") from None
                if value != shape[i]:
                    raise self._dim_error(plan.param, i, shape, f"{expr.text} = {value} with "
                                          f"{self._bindings(expr, env, origins)}")

        if origins is not None:
            for p, _ in self._scalars:
                value = env[p.name]
                low, high = INT_RANGES[p.dtype]
                if value > high:
                    raise self._error(p.name, f"{p.name}={value} from {self._origin(p.name, origins)} "
                                      f"does not fit {p.dtype} (at most {high})")
                cargs[p.index] = value
        if not self._status:
            self._function(*cargs)
            return
        status, address = thread_status()
        self._function(*cargs, address)
        if status.check:
            raise_failure(status, self._handle, f"kernel {self.name!r}")

    # -- checks --------------------------------------------------------------------------

    def _check_buffer(self, plan: _BufferPlan, arg: Any) -> ArrayView:
        p = plan.param
        try:
            view = array_view(arg)
        except ArgumentError as exc:
            raise self._error(p.name, str(exc)) from None
        if view.dtype != p.dtype:
            raise self._error(p.name, f"expected {p.dtype} elements, got {view.dtype} "
                              f"({describe_value(arg)})")
        shape = view.shape
        if plan.ndim is not None and len(shape) != plan.ndim:
            raise self._error(p.name, f"expected {_dims(plan.ndim)} ({p.describe()}), got "
                              f"{_dims(len(shape))} with shape {tuple(shape)}")
        for i, value in plan.const_dims:
            if shape[i] != value:
                raise self._dim_error(p, i, shape, str(value))
        if not view.c_contiguous:
            raise self._error(p.name, f"expected a C-contiguous (row-major, compact) array, got "
                              f"strides {view.strides} (in elements) for shape {tuple(shape)}; "
                              f"nothing is copied silently: pass np.ascontiguousarray({p.name}) "
                              f"(or {p.name}.contiguous() for a torch tensor), which copies")
        if p.written and not view.writable:
            raise self._error(p.name, f"the kernel writes {p.name}, but the array given is read-only; "
                              f"pass a writable array (e.g. {p.name}.copy())")
        if view.data % plan.itemsize:
            raise self._error(p.name, f"the data at {view.data:#x} is not aligned to its "
                              f"{plan.itemsize}-byte elements; pass an aligned copy ({p.name}.copy())")
        return view

    def _error(self, param: str, message: str) -> ArgumentError:
        return ArgumentError(f"kernel {self.name!r}, parameter {param!r}: {message}")

    def _dim_error(self, p: Param, i: int, shape: tuple[int, ...], expected: str) -> ArgumentError:
        return self._error(p.name, f"dimension {i} should be {expected}, but {p.name} has {shape[i]} "
                           f"there (its shape is {tuple(shape)}; expected {p.describe()})")

    @staticmethod
    def _origin(name: str, origins: dict[str, tuple[str, int]] | None) -> str:
        if origins is None:
            return f"argument {name}"
        param, dim = origins[name]
        return f"{param} (dimension {dim})"

    def _bindings(self, expr: ShapeExpr, env: Mapping[str, int],
                  origins: dict[str, tuple[str, int]] | None) -> str:
        return ", ".join(f"{n}={env[n]} from {self._origin(n, origins)}" for n in expr.names)

    def _count_error(self, nargs: int) -> ArgumentError:
        names = ", ".join(p.name for p in self.params)
        text = f"kernel {self.name!r} takes {self._nparams} arguments ({names})"
        if self._scalars and not self._not_inferable:
            buffers = ", ".join(b.param.name for b in self._buffers)
            symbols = ", ".join(p.name for p, _ in self._scalars)
            text += f", or {self._nbuffers} ({buffers}) with {symbols} read off their shapes"
        text += f"; got {nargs}"
        if self._scalars and self._not_inferable and nargs == self._nbuffers:
            text += (f" (scalars cannot be left out: {', '.join(self._not_inferable)} "
                     f"is not a whole dimension of any tensor)")
        return ArgumentError(text)


# -- scalar conversion -----------------------------------------------------------------

def _scalar_class(dtype: str) -> str:
    if dtype in INT_RANGES:
        return "int"
    return "bool" if dtype == "bool" else "float"


def _convert_int(kernel: Kernel, p: Param, value: Any) -> int:
    if not isinstance(value, (bool, np.bool_)):
        try:
            number = operator.index(value)
        except TypeError:
            pass
        else:
            low, high = INT_RANGES[p.dtype]
            if low <= number <= high:
                return number
            raise kernel._error(p.name, f"{number} is out of range for {p.dtype} "
                                f"(expected an integer in [{low}, {high}])")
    raise kernel._error(p.name, f"expected an integer ({p.dtype}), got {describe_value(value)}")


def _convert_float(kernel: Kernel, p: Param, value: Any) -> float:
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
        try:
            number = float(value)
        except OverflowError:  # an int beyond float64
            number = None
        # inf and nan are values a kernel may be given; a finite number that would become inf is not.
        if number is not None and not (p.dtype == "float32" and math.isfinite(number)
                                       and abs(number) > _FLOAT32_MAX):
            return number
        text = f"{number:g}" if number is not None else "an integer beyond float64"
        largest = _FLOAT32_MAX if p.dtype == "float32" else _FLOAT64_MAX
        raise kernel._error(p.name, f"{text} is out of range for {p.dtype} "
                            f"(its largest finite value is {largest:g})")
    raise kernel._error(p.name, f"expected a real number ({p.dtype}), got {describe_value(value)}")


def _convert_bool(kernel: Kernel, p: Param, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise kernel._error(p.name, f"expected True or False (bool), got {describe_value(value)}")


_CONVERTERS = {"int": _convert_int, "float": _convert_float, "bool": _convert_bool}


def _plan(p: Param) -> _BufferPlan:
    shape = p.shape if p.kind == "tensor" else None
    dims = list(enumerate(shape or ()))
    return _BufferPlan(
        param=p, itemsize=ITEMSIZE[p.dtype], np_dtype=_NUMPY_DTYPES.get(p.dtype, _NO_DTYPE), ndim=None if shape is None else len(shape),
        const_dims=tuple((i, d) for i, d in dims if isinstance(d, int)),
        symbol_dims=tuple((i, d) for i, d in dims if isinstance(d, str)),
        expr_dims=tuple((i, d) for i, d in dims if isinstance(d, ShapeExpr)))


def _dims(n: int) -> str:
    return "a scalar (0 dimensions)" if n == 0 else f"{n} dimension{'s' if n != 1 else ''}"


# -- modules -----------------------------------------------------------------------------

class Module:
    """A loaded library: its kernels by name, and the thread count of its OpenMP runtime.

    ``module["matmul"]`` and ``module.matmul`` give the same :class:`Kernel`.
    """

    def __init__(self, lib_path: Path, kernels: Mapping[str, Kernel], library: ctypes.CDLL,
                 source_path: Path | None = None):
        self.lib_path = lib_path
        self.source_path = source_path
        self._library = library
        self._kernels = dict(kernels)
        self._set_threads = library[SET_THREADS_SYMBOL]
        self._set_threads.argtypes, self._set_threads.restype = [ctypes.c_int], None
        self._get_threads = library[GET_THREADS_SYMBOL]
        self._get_threads.argtypes, self._get_threads.restype = [], ctypes.c_int

    @property
    def kernels(self) -> Mapping[str, Kernel]:
        """Every kernel, by name (read-only)."""
        return MappingProxyType(self._kernels)

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self._kernels[name]
        except KeyError:
            raise KeyError(f"{self.lib_path} has no kernel {name!r}; "
                           f"its kernels: {', '.join(self._kernels) or '(none)'}") from None

    def __getattr__(self, name: str) -> Kernel:
        kernels = self.__dict__.get("_kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(f"module {self.__dict__.get('lib_path')} has no kernel or attribute "
                             f"{name!r}; its kernels: {', '.join(kernels) or '(none)'}")

    def __contains__(self, name: object) -> bool:
        return name in self._kernels

    def __iter__(self) -> Iterator[str]:
        return iter(self._kernels)

    def __len__(self) -> int:
        return len(self._kernels)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._kernels))

    def __repr__(self) -> str:
        return f"<Module {self.lib_path} kernels=[{', '.join(self._kernels)}]>"

    def set_num_threads(self, n: int) -> None:
        """Use ``n`` threads in this library's parallel regions from now on."""
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or not 1 <= n <= 2 ** 31 - 1:
            raise ArgumentError(f"set_num_threads expects a positive integer, got {describe_value(n)}")
        self._set_threads(int(n))

    @property
    def num_threads(self) -> int:
        """How many threads the library's parallel regions use."""
        return int(self._get_threads())


def load_module(lib_path: str | Path, signatures: Sequence[Mapping[str, Any]],
                source_path: str | Path | None = None) -> Module:
    """Load the shared library at ``lib_path`` and bind a :class:`Kernel` per signature.

    ``source_path`` is recorded for messages; when it is not given and a ``source.c`` lies
    beside the library (as in a build-cache entry), that one is recorded. Raises
    :class:`LoadError` when the library is missing or cannot be loaded, a signature is
    malformed, or a kernel or thread-control function is not exported.
    """
    path = Path(lib_path)
    if not path.is_file():
        raise LoadError(f"no built library at {path}")
    if isinstance(signatures, Mapping) or not isinstance(signatures, Sequence):
        raise LoadError(f"signatures must be a list of kernel signatures, got {type(signatures).__name__}")
    parsed = [parse_signature(s) for s in signatures]
    names = [s.name for s in parsed]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise LoadError(f"kernel(s) {', '.join(duplicates)} have more than one signature for {path}")

    try:
        library = ctypes.CDLL(str(path.resolve()))
    except OSError as exc:
        raise LoadError(f"cannot load {path}: {exc}") from None
    symbols = [s.c_symbol for s in parsed]
    for symbol in (SET_THREADS_SYMBOL, GET_THREADS_SYMBOL, *symbols):
        try:
            library[symbol]
        except AttributeError:
            what = "kernel" if symbol in symbols else "thread-control function"
            raise LoadError(f"{path} does not export the {what} {symbol!r}; a taskloom library "
                            f"exports every kernel of its signatures and {SET_THREADS_SYMBOL}/"
                            f"{GET_THREADS_SYMBOL}")

    kernels = {sig.name: Kernel(sig, library[sig.c_symbol], raw, str(path), library)
               for sig, raw in zip(parsed, signatures)}
    if source_path is None:
        sibling = path.with_name("source.c")
        source = sibling if sibling.is_file() else None
    else:
        source = Path(source_path)
    return Module(path, kernels, library, source)
