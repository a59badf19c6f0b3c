"""Zero-copy views of kernel arguments: numpy arrays and any DLPack producer (torch, jax, ...).

A kernel needs a data pointer, a shape, strides, a dtype and to know whether it may write.
:func:`array_view` reads those off a numpy array directly, or off the DLPack capsule an
object's ``__dlpack__`` returns, parsed here with ctypes. Parsing the capsule ourselves (rather
than going through ``np.from_dlpack``) is what lets bfloat16 tensors in: numpy has no
bfloat16, DLPack does. Nothing is ever copied: an argument that cannot be viewed in place
is an :class:`ArgumentError`.

The other direction, :func:`as_torch`, hands a numpy result to torch without a copy.
torch is imported only when that function runs.
"""
from __future__ import annotations

import ctypes
import struct
from typing import Any, NamedTuple

import numpy as np

from taskloom.errors import ArgumentError, TaskloomError

#: Element types a kernel signature may name.
DTYPE_NAMES: tuple[str, ...] = ("float64", "float32", "float16", "bfloat16", "int64", "int32",
                                "int16", "int8", "uint8", "bool")

#: Bytes per element of each dtype a view may report.
ITEMSIZE: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
    "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "uint16": 2, "uint32": 4, "uint64": 8,
    "complex64": 8, "complex128": 16,
}


class ArrayView(NamedTuple):
    """Where an argument's elements are and how they are laid out.

    ``strides`` count elements, not bytes. ``keepalive`` owns the memory (the array, or the
    DLPack capsule) and must outlive every use of ``data``.
    """

    data: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    device: str
    writable: bool
    keepalive: Any
    c_contiguous: bool

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)


def array_view(obj: Any) -> ArrayView:
    """Describe a numpy array or a DLPack-capable CPU tensor without copying it.

    Raises :class:`ArgumentError` for anything else: a non-array, a tensor on another device,
    a dtype DLPack or numpy cannot describe, a non-native byte order.
    """
    if isinstance(obj, np.ndarray):
        return _numpy_view(obj)
    if hasattr(obj, "__dlpack__"):
        return _dlpack_view(obj)
    raise ArgumentError(f"expected a numpy array or a DLPack-capable tensor (torch.Tensor, ...), "
                        f"got {describe_value(obj)}")


def to_dlpack_compatible(array: Any) -> Any:
    """``array`` itself, once checked that DLPack consumers can import it without a copy.

    A numpy array must be writable (an importer such as torch would otherwise get a
    writable tensor over read-only memory), in native byte order, and of a numeric or bool
    dtype. Objects that already speak DLPack are returned unchanged.
    """
    if isinstance(array, np.ndarray):
        if not array.flags.writeable:
            raise ArgumentError("cannot export a read-only numpy array through DLPack: the importer "
                                "would be able to write to it; pass array.copy() if a copy is fine")
        dtype = array.dtype
        if not dtype.isnative or dtype.kind not in "biufc":
            raise ArgumentError(f"cannot export a numpy array of dtype {dtype.str!r} ({dtype.name}) "
                                f"through DLPack: it takes native-endian bool, integer, float and "
                                f"complex arrays")
        return array
    if hasattr(array, "__dlpack__"):
        return array
    raise ArgumentError(f"expected a numpy array or a DLPack-capable tensor, got {describe_value(array)}")


def as_torch(array: Any) -> Any:
    """A ``torch.Tensor`` sharing memory with ``array`` (numpy or DLPack); no copy is made.

    bfloat16 numpy arrays (``ml_dtypes.bfloat16``) come back as ``torch.bfloat16`` tensors
    over the same bytes. A torch tensor is returned as it is.
    """
    try:
        import torch
    except ImportError:
        raise TaskloomError("as_torch needs PyTorch, which is not installed; "
                            "install it with pip install 'taskloom[torch]'") from None
    if isinstance(array, torch.Tensor):
        return array
    if isinstance(array, np.ndarray) and array.dtype.name == "bfloat16" and array.dtype.itemsize == 2:
        # numpy cannot export bfloat16 through DLPack; its bits travel as uint16 and are
        # reinterpreted on the torch side, still without a copy.
        bits = to_dlpack_compatible(array.view(np.uint16))
        return torch.from_dlpack(bits).view(torch.bfloat16)
    return torch.from_dlpack(to_dlpack_compatible(array))


def describe_value(obj: Any) -> str:
    """A short description of a value for error messages: its type, and shape and dtype if any."""
    if isinstance(obj, np.ndarray):
        return f"a numpy array of {obj.dtype.name} with shape {tuple(obj.shape)}"
    type_name = f"{type(obj).__module__}.{type(obj).__qualname__}".removeprefix("builtins.")
    shape, dtype = getattr(obj, "shape", None), getattr(obj, "dtype", None)
    if shape is not None and dtype is not None:
        try:
            return f"a {type_name} of {dtype} with shape {tuple(shape)}"
        except TypeError:
            pass
    text = repr(obj)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{text} ({type_name})"


# -- numpy -------------------------------------------------------------------------------

_NUMPY_NAMES: dict[np.dtype, str] = {}


def _numpy_dtype_name(dtype: np.dtype) -> str:
    name = _NUMPY_NAMES.get(dtype)
    if name is not None:
        return name
    if not dtype.isnative:
        raise ArgumentError(f"the array has non-native byte order ({dtype.str!r}); "
                            f"convert it with arr.astype(arr.dtype.newbyteorder('='))")
    # ml_dtypes.bfloat16 is a two-byte user dtype named "bfloat16".
    if dtype.kind in "biufc" or (dtype.name == "bfloat16" and dtype.itemsize == 2):
        _NUMPY_NAMES[dtype] = dtype.name
        return dtype.name
    raise ArgumentError(f"arrays of dtype {dtype} cannot be passed to a kernel; "
                        f"use one of {', '.join(DTYPE_NAMES)}")


def _numpy_view(arr: np.ndarray) -> ArrayView:
    name = _numpy_dtype_name(arr.dtype)
    itemsize = arr.itemsize
    byte_strides = arr.strides
    strides = tuple(s // itemsize for s in byte_strides)
    contiguous = arr.flags.c_contiguous
    if not contiguous and any(s % itemsize for s in byte_strides):
        raise ArgumentError(f"the array's strides {byte_strides} (bytes) are not multiples of its "
                            f"item size {itemsize}; make a contiguous copy with np.ascontiguousarray")
    return ArrayView(arr.ctypes.data, arr.shape, strides, name, "cpu", arr.flags.writeable, arr,
                     contiguous)


# -- DLPack ----------------------------------------------------------------------------
# The structures of dlpack.h, read with struct (one read per structure is several times
# faster than field-by-field ctypes access):
#   DLTensor {void* data; DLDevice {int32 type, id}; int32 ndim;
#             DLDataType {uint8 code, bits; uint16 lanes}; int64* shape; int64* strides;
#             uint64 byte_offset}                                           48 bytes
#   DLManagedTensor {DLTensor; void* manager_ctx; void (*deleter)(...)}    (v0.x)
#   DLManagedTensorVersioned {DLPackVersion {uint32 major, minor}; void* manager_ctx;
#                             void (*deleter)(...); uint64 flags; DLTensor}  (v1.x)
_TENSOR = struct.Struct("=QiiiBBHQQQ")
_VERSIONED = struct.Struct("=IIQQQ" + _TENSOR.format[1:])
_INT64S: dict[int, struct.Struct] = {}

_FLAG_READ_ONLY = 1 << 0
_FLAG_IS_COPIED = 1 << 1
_KDLCPU = 1
_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal",
                 9: "vpi", 10: "rocm", 11: "rocm_host", 12: "ext_dev", 13: "cuda_managed",
                 14: "oneapi", 15: "webgpu", 16: "hexagon", 17: "maia"}
_DL_DTYPES = {(0, 8, 1): "int8", (0, 16, 1): "int16", (0, 32, 1): "int32", (0, 64, 1): "int64",
              (1, 8, 1): "uint8", (1, 16, 1): "uint16", (1, 32, 1): "uint32", (1, 64, 1): "uint64",
              (2, 16, 1): "float16", (2, 32, 1): "float32", (2, 64, 1): "float64",
              (4, 16, 1): "bfloat16", (5, 64, 1): "complex64", (5, 128, 1): "complex128",
              (6, 8, 1): "bool"}

_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

# Producer types whose __dlpack__ predates the max_version/copy keywords.
_LEGACY_PRODUCERS: set[type] = set()


def _device_name(device_type: int, device_id: int) -> str:
    return f"{_DEVICE_NAMES.get(device_type, f'device type {device_type}')}:{device_id}"


def _not_on_cpu(device: str) -> ArgumentError:
    return ArgumentError(f"the kernel is a CPU kernel and the tensor is on {device}; "
                         f"move it to the CPU first (e.g. tensor.cpu(), which copies)")


def _export(obj: Any) -> Any:
    """Ask the producer for a capsule: versioned and copy-free if it understands that."""
    kind = type(obj)
    if kind in _LEGACY_PRODUCERS:
        return obj.__dlpack__()
    try:
        return obj.__dlpack__(max_version=(1, 0), copy=False)
    except TypeError:
        capsule = obj.__dlpack__()
        _LEGACY_PRODUCERS.add(kind)  # only once the plain call has worked
        return capsule


def _int64s(address: int, n: int) -> tuple[int, ...]:
    reader = _INT64S.get(n)
    if reader is None:
        reader = _INT64S[n] = struct.Struct(f"={n}q")
    return reader.unpack(ctypes.string_at(address, reader.size))


def _dlpack_view(obj: Any) -> ArrayView:
    try:
        capsule = _export(obj)
    except Exception as exc:  # the producer refused; say why in our terms
        device = None
        try:
            device_type, device_id = obj.__dlpack_device__()
            device = _device_name(int(device_type), int(device_id))
        except Exception:
            pass
        if device is not None and not device.startswith("cpu:"):
            raise _not_on_cpu(device) from None
        raise ArgumentError(f"could not view {describe_value(obj)} through DLPack: {exc}") from None

    try:
        name = _capsule_name(capsule)
    except (ctypes.ArgumentError, TypeError, ValueError):
        name = None
    if name == b"dltensor_versioned":
        (major, minor, _ctx, _deleter, flags, data, device_type, device_id, ndim, code, bits,
         lanes, shape_ptr, strides_ptr, byte_offset) = _VERSIONED.unpack(
            ctypes.string_at(_capsule_pointer(capsule, name), _VERSIONED.size))
        if major != 1:
            raise ArgumentError(f"{describe_value(obj)} was exported with DLPack {major}.{minor}; "
                                f"only 1.x is understood")
    elif name == b"dltensor":
        flags = 0
        (data, device_type, device_id, ndim, code, bits, lanes, shape_ptr, strides_ptr,
         byte_offset) = _TENSOR.unpack(ctypes.string_at(_capsule_pointer(capsule, name), _TENSOR.size))
    else:
        raise ArgumentError(f"__dlpack__ of {describe_value(obj)} returned {capsule!r}, "
                            f"not an unused DLPack capsule")

    if device_type != _KDLCPU:
        raise _not_on_cpu(_device_name(device_type, device_id))
    if flags & _FLAG_IS_COPIED:
        raise ArgumentError(f"the producer of {describe_value(obj)} copied it when exporting, so a "
                            f"kernel would not see or change the original; pass a CPU tensor")
    dtype = _DL_DTYPES.get((code, bits, lanes))
    if dtype is None:
        raise ArgumentError(f"{describe_value(obj)} has DLPack dtype code={code} bits={bits} "
                            f"lanes={lanes}, which no kernel takes; use one of {', '.join(DTYPE_NAMES)}")

    shape = _int64s(shape_ptr, ndim) if ndim else ()
    if strides_ptr and ndim:
        strides = _int64s(strides_ptr, ndim)
        contiguous = _is_c_contiguous(shape, strides)
    else:  # NULL strides mean compact row-major
        strides = _c_strides(shape)
        contiguous = True
    # The capsule keeps the producer's memory alive; when it is collected unconsumed, the
    # producer's capsule destructor releases the tensor.
    return ArrayView(data + byte_offset, shape, strides, dtype, "cpu", not flags & _FLAG_READ_ONLY,
                     capsule, contiguous)


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _is_c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Row-major and compact; the stride of a size-1 dimension does not matter (as in numpy)."""
    if 0 in shape:
        return True
    step = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != step:
            return False
        step *= n
    return True
