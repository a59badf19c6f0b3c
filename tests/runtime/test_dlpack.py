import ctypes
import subprocess
import sys

import numpy as np
import pytest

from taskloom.errors import ArgumentError
from taskloom.runtime import array_view, as_torch, to_dlpack_compatible

from tests.runtime.kernels import check_usable


def _torch():
    return pytest.importorskip("torch")


# -- numpy -------------------------------------------------------------------------------

def test_numpy_view_is_the_array_itself():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = array_view(a)
    assert view.data == a.ctypes.data and view.keepalive is a
    assert view.shape == (3, 4) and view.strides == (4, 1) and view.ndim == 2
    assert view.dtype == "float32" and view.device == "cpu" and view.writable and view.c_contiguous
    t = array_view(a.T)
    assert t.strides == (1, 4) and not t.c_contiguous and t.data == a.ctypes.data
    rev = array_view(a[:, ::-1])
    assert rev.strides == (4, -1) and not rev.c_contiguous
    assert array_view(a[:, :1]).c_contiguous is False
    assert array_view(a[:1, :]).c_contiguous  # a size-1 dimension's stride does not matter


@pytest.mark.parametrize("dtype, name", [(np.float64, "float64"), (np.float16, "float16"),
                                         (np.int64, "int64"), (np.int16, "int16"),
                                         (np.uint8, "uint8"), (np.bool_, "bool")])
def test_numpy_dtype_names(dtype, name):
    assert array_view(np.zeros(2, dtype=dtype)).dtype == name


def test_numpy_read_only_and_rejections():
    a = np.zeros(3)
    a.flags.writeable = False
    assert array_view(a).writable is False
    with pytest.raises(ArgumentError, match="byte order"):
        array_view(np.zeros(3, dtype=">f8"))
    with pytest.raises(ArgumentError, match="dtype object cannot be passed"):
        array_view(np.array([None, 1]))
    with pytest.raises(ArgumentError, match=r"expected a numpy array .* got 3 \(int\)"):
        array_view(3)


def test_ml_dtypes_bfloat16_array_is_bfloat16(module):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([1.5, -2.0, 0.25], dtype=ml_dtypes.bfloat16)
    assert array_view(values).dtype == "bfloat16"
    module.bf16_negate(values)
    np.testing.assert_array_equal(values.astype(np.float32), [-1.5, 2.0, -0.25])


# -- torch through DLPack ----------------------------------------------------------------

def test_torch_view_shares_memory():
    torch = _torch()
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    view = array_view(t)
    assert view.data == t.data_ptr() and view.shape == (3, 4) and view.strides == (4, 1)
    assert view.dtype == "float32" and view.device == "cpu" and view.writable and view.c_contiguous
    offset = array_view(t[1:, 2:])
    assert offset.data == t.data_ptr() + (4 + 2) * 4 and offset.strides == (4, 1)
    assert not offset.c_contiguous
    assert not array_view(t.T).c_contiguous
    assert array_view(torch.zeros(3, dtype=torch.bool)).dtype == "bool"
    assert array_view(torch.zeros(3, dtype=torch.bfloat16)).dtype == "bfloat16"
    assert array_view(torch.tensor(2.0)).shape == ()


def test_torch_float32_tensors_are_written_in_place(module):
    torch = _torch()
    x = torch.linspace(-1, 1, 100)
    y = torch.ones(100)
    y_before = y.data_ptr()
    module.axpy(100, 3.0, x, y)
    assert y.data_ptr() == y_before
    torch.testing.assert_close(y, 1 + 3 * x)
    z = torch.zeros(10)
    module.axpy(4, 1.0, x[:4], z[6:])  # a view with an offset: the kernel writes z[6:10]
    assert torch.equal(z[6:], x[:4]) and torch.equal(z[:6], torch.zeros(6))
    A, B = torch.randn(6, 8), torch.randn(8, 5)
    C = torch.zeros(6, 5)
    module.matmul(A, B, C)  # M, N inferred from torch shapes
    torch.testing.assert_close(C, A @ B)


def test_torch_and_numpy_mix(module):
    torch = _torch()
    x = np.arange(4, dtype=np.float32)
    y = torch.zeros(4)
    module.axpy(4, 1.0, x, y)
    assert y.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_torch_bfloat16_in_place(module):
    torch = _torch()
    t = torch.tensor([1.0, -2.5, 0.0078125, 3e38], dtype=torch.bfloat16)
    expected = -t
    module.bf16_negate(t)  # N inferred; the kernel writes the tensor's own memory
    assert torch.equal(t, expected)
    out = torch.empty(4)
    module.bf16_widen(t, out)
    assert torch.equal(out, t.float())


def test_torch_wrong_dtype_names_both(module):
    torch = _torch()
    with pytest.raises(ArgumentError, match="'x': expected bfloat16 elements, got float32"):
        module.bf16_negate(torch.zeros(3))
    with pytest.raises(ArgumentError, match="'y': expected float32 elements, got bfloat16"):
        module.axpy(3, 1.0, torch.zeros(3), torch.zeros(3, dtype=torch.bfloat16))
    check_usable(module)


def test_torch_transpose_is_rejected_not_copied(module):
    torch = _torch()
    A = torch.zeros(8, 4).T
    with pytest.raises(ArgumentError) as info:
        module.matmul(A, torch.zeros(8, 3), torch.zeros(4, 3))
    text = str(info.value)
    assert "parameter 'A'" in text and "C-contiguous" in text and "A.contiguous()" in text
    check_usable(module)


def test_torch_dimension_mismatch(module):
    torch = _torch()
    with pytest.raises(ArgumentError, match=r"'C'.*M=4 from A \(dimension 0\), but C has 2"):
        module.matmul(torch.zeros(4, 8), torch.zeros(8, 3), torch.zeros(2, 3))
    check_usable(module)


def test_torch_tensor_requiring_grad(module):
    torch = _torch()
    x = torch.zeros(3, requires_grad=True)
    with pytest.raises(ArgumentError, match="'x'.*could not view .* through DLPack.*detach"):
        module.axpy(3, 1.0, x, torch.zeros(3))
    check_usable(module)


class _Legacy:
    """A producer whose __dlpack__ takes no keywords (the pre-1.0 protocol)."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack__(self):
        return self.inner.__dlpack__()

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


class _Forward:
    """A producer that forwards every keyword (versioned capsules)."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack__(self, **kwargs):
        return self.inner.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


def test_legacy_and_versioned_producers(module):
    torch = _torch()
    y = torch.zeros(3)
    module.axpy(3, 1.0, _Legacy(torch.ones(3)), _Legacy(y))
    module.axpy(3, 1.0, _Forward(torch.ones(3)), _Forward(y))
    assert y.tolist() == [2.0, 2.0, 2.0]


def test_read_only_flag_of_a_versioned_capsule(module):
    # numpy marks read-only arrays in a versioned capsule; a producer that is not
    # numpy itself reaches the capsule parser.
    frozen = np.zeros(3, dtype=np.float32)
    frozen.flags.writeable = False
    view = array_view(_Forward(frozen))
    assert view.writable is False and view.data == frozen.ctypes.data
    with pytest.raises(ArgumentError, match="'y': the kernel writes y, but the array given is read-only"):
        module.axpy(3, 1.0, np.ones(3, np.float32), _Forward(frozen))
    module.axpy(3, 1.0, _Forward(frozen), np.ones(3, np.float32))  # reading it is fine
    check_usable(module)


# -- tensors that are not on the CPU ---------------------------------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class _FakeGpuTensor:
    """Exports a hand-made DLPack capsule that says the data lives on cuda:1."""

    def __init__(self, n):
        self.shape = (ctypes.c_int64 * 1)(n)
        self.managed = _DLManagedTensor()
        t = self.managed.dl_tensor
        t.data, t.device.device_type, t.device.device_id, t.ndim = 0x1000, 2, 1, 1
        t.code, t.bits, t.lanes = 2, 32, 1
        t.shape = ctypes.addressof(self.shape)

    def __dlpack__(self):
        return _capsule_new(ctypes.addressof(self.managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (2, 1)


class _RefusingGpuTensor:
    """A CUDA producer that refuses to export to a CPU consumer."""

    def __dlpack__(self, **kwargs):
        raise BufferError("cannot export to this device")

    def __dlpack_device__(self):
        return (2, 0)


@pytest.mark.parametrize("tensor, device", [(_FakeGpuTensor(3), "cuda:1"), (_RefusingGpuTensor(), "cuda:0")])
def test_non_cpu_tensor_is_rejected(module, tensor, device):
    with pytest.raises(ArgumentError) as info:
        module.axpy(3, 1.0, tensor, np.zeros(3, np.float32))
    text = str(info.value)
    assert "parameter 'x'" in text and f"the kernel is a CPU kernel and the tensor is on {device}" in text
    check_usable(module)


def test_not_a_capsule():
    class Odd:
        def __dlpack__(self, **kwargs):
            return "capsule"

    with pytest.raises(ArgumentError, match="not an unused DLPack capsule"):
        array_view(Odd())


# -- handing results to torch ------------------------------------------------------------

def test_as_torch_shares_memory():
    torch = _torch()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = as_torch(a)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.shape == (2, 3)
    assert t.data_ptr() == a.ctypes.data
    a[0, 0] = 42.0
    assert t[0, 0].item() == 42.0
    assert as_torch(t) is t


def test_as_torch_bfloat16_from_ml_dtypes():
    torch = _torch()
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.array([1.0, -3.0], dtype=ml_dtypes.bfloat16)
    t = as_torch(a)
    assert t.dtype == torch.bfloat16 and t.data_ptr() == a.ctypes.data
    assert t.tolist() == [1.0, -3.0]


def test_as_torch_of_a_kernel_output(module):
    _torch()
    y = np.zeros(3, dtype=np.float32)
    out = as_torch(y)
    module.axpy(3, 2.0, np.ones(3, np.float32), y)
    assert out.tolist() == [2.0, 2.0, 2.0]


def test_to_dlpack_compatible():
    a = np.zeros(3)
    assert to_dlpack_compatible(a) is a
    frozen = np.zeros(3)
    frozen.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        to_dlpack_compatible(frozen)
    with pytest.raises(ArgumentError, match="'>f4'"):
        to_dlpack_compatible(np.zeros(3, ">f4"))
    with pytest.raises(ArgumentError, match="expected a numpy array"):
        to_dlpack_compatible([1, 2])


def test_runtime_import_does_not_import_torch():
    code = "import sys, taskloom.runtime; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
