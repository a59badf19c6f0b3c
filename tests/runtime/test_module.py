import ctypes
import shutil

import numpy as np
import pytest

from taskloom.backend.compiler import compile_shared_library
from taskloom.errors import ArgumentError, LoadError, TaskloomError
from taskloom.runtime import Kernel, Module, load_module
from taskloom.target import CpuTarget

from tests.runtime.kernels import SIGNATURES, check_usable, scalar, tensor


def f32(*shape, start=0.0):
    return (np.arange(int(np.prod(shape)), dtype=np.float32) + start).reshape(shape)


# -- calls that work ---------------------------------------------------------------------

def test_axpy_matches_numpy(module):
    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    y = np.full(1000, 3.0, dtype=np.float32)
    expected = y + np.float32(0.5) * x
    assert module.axpy(1000, 0.5, x, y) is None
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_matmul_with_all_arguments_and_with_symbols_inferred(module):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((37, 8), dtype=np.float32)
    B = rng.standard_normal((8, 19), dtype=np.float32)
    C = np.zeros((37, 19), dtype=np.float32)
    module.matmul(37, 19, A, B, C)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)
    C2 = np.zeros_like(C)
    module.matmul(A, B, C2)  # M and N read off the shapes
    np.testing.assert_array_equal(C2, C)


def test_symbols_serve_every_size_including_zero(module):
    for m in (0, 1, 5):
        A, B, C = f32(m, 8), f32(8, 3), np.full((m, 3), -1, dtype=np.float32)
        module.matmul(A, B, C)
        np.testing.assert_allclose(C, A @ B)


def test_expression_shape_with_inference(module):
    x = np.arange(10, dtype=np.float64)
    y = np.zeros(5)
    module.pairsum(x, y)  # N = 5 from y, x checked against N * 2
    np.testing.assert_array_equal(y, x[0::2] + x[1::2])
    module.pairsum(5, x, y)
    with pytest.raises(ArgumentError) as info:
        module.pairsum(np.zeros(9), y)
    text = str(info.value)
    assert "'pairsum'" in text and "'x'" in text and "N * 2 = 10" in text and "N=5 from y" in text
    check_usable(module)


def test_expression_with_floor_division_needs_the_scalar(module):
    x, y = f32(3, 4), np.zeros(3, dtype=np.float32)
    module.blocksum(10, x, y)  # (10 + 3) // 4 == 3
    np.testing.assert_array_equal(y, x.sum(axis=1))
    with pytest.raises(ArgumentError, match=r"'y'.*\(N \+ 3\) // 4 = 3 with N=10 from argument N"):
        module.blocksum(10, x, np.zeros(4, dtype=np.float32))
    with pytest.raises(ArgumentError) as info:
        module.blocksum(x, y)  # N is never a whole dimension, so it cannot be inferred
    assert "takes 3 arguments (N, x, y)" in str(info.value) and "N is not a whole dimension" in str(info.value)


def test_scalar_kinds_and_pointer_parameter(module):
    out = np.zeros(6)
    module.ramp(6, 1.5, False, out)
    np.testing.assert_array_equal(out, 1.5 * np.arange(6))
    module.ramp(np.int64(4), np.float32(2.0), np.bool_(True), out)
    np.testing.assert_array_equal(out[:4], -2.0 * np.arange(4))
    module.ramp(3, float("inf"), False, out)  # inf is a value a kernel may be given
    assert out[1] == np.inf


def test_int8_scalar(module):
    x = np.array([1, -2, 3], dtype=np.int8)
    y = np.zeros(3, dtype=np.int8)
    module.scale_i8(3, -3, x, y)
    np.testing.assert_array_equal(y, [-3, 6, -9])


def test_module_access(module, built):
    assert isinstance(module, Module) and isinstance(module.axpy, Kernel)
    assert module["axpy"] is module.axpy is module.kernels["axpy"]
    assert set(module.kernels) == {s["name"] for s in SIGNATURES}
    assert "matmul" in module and len(module) == len(SIGNATURES) and "matmul" in dir(module)
    assert module.lib_path == built and module.source_path == built.with_name("source.c")
    assert "float32[M, 8]" in repr(module.matmul) and "C: float32[M, N] (written)" in repr(module.matmul)
    assert module.axpy.signature == SIGNATURES[0]
    with pytest.raises(KeyError, match="no kernel 'nope'.*axpy"):
        module["nope"]
    with pytest.raises(AttributeError, match="no kernel or attribute 'nope'"):
        module.nope
    with pytest.raises(TypeError):
        module.kernels["x"] = module.axpy  # read-only view


def test_source_path_given_explicitly(built, tmp_path):
    src = tmp_path / "k.c"
    src.write_text("/* */")
    assert load_module(built, SIGNATURES[:1], source_path=src).source_path == src


def test_threads(module):
    before = module.num_threads
    out = np.zeros(1, dtype=np.int32)
    try:
        module.set_num_threads(2)
        assert module.num_threads == 2
        module.count_threads(out)
        assert out[0] == 2
        module.set_num_threads(1)
        module.count_threads(out)
        assert out[0] == 1
        for bad in (0, -1, 1.5, True, "2"):
            with pytest.raises(ArgumentError, match="positive integer"):
                module.set_num_threads(bad)
        assert module.num_threads == 1
    finally:
        module.set_num_threads(before)
    check_usable(module)


# -- every wrong argument: an ArgumentError naming kernel and parameter -------------------

def ro(array):
    array.flags.writeable = False
    return array


def misaligned_f32(n):
    raw = np.zeros(4 * n + 1, dtype=np.uint8)
    return raw[1:].view(np.float32)


X5, Y5 = f32(5), f32(5)

ERRORS = [
    # (kernel, arguments, the parameter named, substrings the message holds)
    ("axpy", lambda: (5, 2.0, X5), None, ["takes 4 arguments (N, a, x, y)", "got 3"]),
    ("axpy", lambda: (X5, Y5), None, ["takes 4 arguments", "got 2", "scalars cannot be left out",
                                      "a is not a whole dimension"]),
    ("matmul", lambda: (f32(2, 8), f32(8, 2)), None, ["takes 5 arguments", "or 3 (A, B, C)",
                                                      "M, N read off their shapes", "got 2"]),
    ("axpy", lambda: (5, 2.0, [0.0] * 5, f32(5)), "x", ["expected a numpy array or a DLPack", "list"]),
    ("axpy", lambda: (5, 2.0, np.zeros(5), f32(5)), "x", ["expected float32 elements, got float64"]),
    ("axpy", lambda: (5, 2.0, f32(5), np.zeros(5, np.int32)), "y", ["float32", "int32"]),
    ("axpy", lambda: (5, 2.0, f32(5, 1), f32(5)), "x", ["expected 1 dimension", "got 2 dimensions",
                                                        "(5, 1)"]),
    ("axpy", lambda: (6, 2.0, f32(5), f32(5)), "x", ["dimension 0 should be N=6 from argument N",
                                                     "x has 5 there"]),
    ("matmul", lambda: (f32(4, 9), f32(8, 3), f32(4, 3)), "A", ["dimension 1 should be 8", "A has 9",
                                                                "(4, 9)"]),
    ("matmul", lambda: (f32(4, 8), f32(8, 3), f32(5, 3)), "C", ["M=4 from A (dimension 0)",
                                                                "C has 5 there"]),
    ("matmul", lambda: (f32(4, 8), f32(8, 3), f32(4, 2)), "C", ["N=3 from B (dimension 1)"]),
    ("matmul", lambda: (4, 3, f32(3, 8), f32(8, 3), f32(4, 3)), "A", ["M=4 from argument M",
                                                                      "A has 3 there"]),
    ("matmul", lambda: (f32(8, 4).T, f32(8, 3), f32(4, 3)), "A", ["C-contiguous", "np.ascontiguousarray(A)",
                                                                  "strides (1, 4)"]),
    ("axpy", lambda: (5, 2.0, f32(10)[::2], f32(5)), "x", ["C-contiguous", "strides (2,)"]),
    ("axpy", lambda: (5, 2.0, f32(5), ro(f32(5))), "y", ["writes y", "read-only"]),
    ("ramp", lambda: (3, 1.0, False, ro(np.zeros(3))), "out", ["read-only"]),
    ("ramp", lambda: (3, 1.0, False, np.zeros(3, np.float32)), "out", ["expected float64", "float32"]),
    ("ramp", lambda: (3, 1.0, False, np.zeros((4, 4)).T), "out", ["C-contiguous"]),
    ("axpy", lambda: (5, 2.0, misaligned_f32(5), f32(5)), "x", ["not aligned", "4-byte"]),
    ("axpy", lambda: (5, 2.0, f32(5).astype(">f4"), f32(5)), "x", ["byte order", "'>f4'"]),
    ("axpy", lambda: (5.0, 2.0, X5, Y5), "N", ["expected an integer (int32)", "5.0"]),
    ("axpy", lambda: (True, 2.0, X5, Y5), "N", ["expected an integer", "True"]),
    ("axpy", lambda: ("5", 2.0, X5, Y5), "N", ["expected an integer", "'5'"]),
    ("axpy", lambda: (2 ** 31, 2.0, X5, Y5), "N", ["2147483648 is out of range for int32"]),
    ("ramp", lambda: (2 ** 63, 1.0, False, np.zeros(3)), "n", ["out of range for int64"]),
    ("scale_i8", lambda: (3, 200, np.zeros(3, np.int8), np.zeros(3, np.int8)), "s",
     ["200 is out of range for int8", "[-128, 127]"]),
    ("axpy", lambda: (5, "2", X5, Y5), "a", ["expected a real number (float32)"]),
    ("axpy", lambda: (5, 1e39, X5, Y5), "a", ["out of range for float32"]),
    ("axpy", lambda: (5, 10 ** 400, X5, Y5), "a", ["out of range for float32"]),
    ("ramp", lambda: (3, 1.0, 1, np.zeros(3)), "neg", ["expected True or False (bool)"]),
    ("matmul", lambda: (-1, 3, f32(0, 8), f32(8, 3), f32(0, 3)), "M", ["non-negative", "-1"]),
    ("blocksum", lambda: (-5, f32(0, 4), np.zeros(0, np.float32)), "N", ["non-negative"]),
]


@pytest.mark.parametrize("kernel, make_args, param, expected", ERRORS,
                         ids=[f"{e[0]}-{e[2]}-{i}" for i, e in enumerate(ERRORS)])
def test_wrong_arguments_raise_and_leave_the_process_usable(module, kernel, make_args, param, expected):
    args = make_args()
    with pytest.raises(ArgumentError) as info:
        module[kernel](*args)
    text = str(info.value)
    assert f"kernel {kernel!r}" in text
    if param is not None:
        assert f"parameter {param!r}" in text
    for piece in expected:
        assert piece in text, text
    assert isinstance(info.value, TaskloomError)
    check_usable(module)


def test_symbol_inference_rejects_values_beyond_the_scalar_type(built):
    sig = [{"name": "bf16_negate", "params": [scalar("N", "int8"),
                                              tensor("x", "bfloat16", ["N"], written=True)]}]
    small = load_module(built, sig)
    with pytest.raises(ArgumentError, match="'N': N=300 from x .dimension 0. does not fit int8"):
        small.bf16_negate(np.zeros(300, dtype=np.uint16).view(_bf16_or_skip()))


def _bf16_or_skip():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return ml_dtypes.bfloat16


# -- loading -----------------------------------------------------------------------------

def test_missing_library(tmp_path):
    with pytest.raises(LoadError, match="no built library"):
        load_module(tmp_path / "nope.so", SIGNATURES)


def test_not_a_library(tmp_path):
    bogus = tmp_path / "lib.so"
    bogus.write_text("not an ELF file")
    with pytest.raises(LoadError, match="cannot load"):
        load_module(bogus, SIGNATURES)


def test_missing_kernel_symbol(built):
    with pytest.raises(LoadError, match="does not export the kernel 'nowhere'"):
        load_module(built, [{"name": "nowhere", "params": []}])


def test_missing_thread_functions(tmp_path, monkeypatch):
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path / "cache"))
    lib = compile_shared_library("void noop(void) {}\n", CpuTarget.host(), name="noop")
    with pytest.raises(LoadError, match="thread-control function 'taskloom_set_num_threads'"):
        load_module(lib, [{"name": "noop", "params": []}])


BAD_SIGNATURES = [
    ({"name": "1axpy", "params": []}, "invalid name '1axpy'"),
    ({"name": "axpy"}, "'params' must be a list"),
    ({"name": "axpy", "params": [{"name": "N", "kind": "scalar", "dtype": "int128"}]},
     "parameter 'N': dtype must be one of"),
    ({"name": "axpy", "params": [{"name": "N", "kind": "value", "dtype": "int32"}]},
     "parameter 'N': kind must be one of"),
    ({"name": "axpy", "params": [scalar("N", "float16")]}, "parameter 'N': a scalar parameter cannot be float16"),
    ({"name": "axpy", "params": [scalar("N"), scalar("N")]}, "parameter 'N': the name is used by two"),
    ({"name": "axpy", "params": [{"name": "x", "kind": "tensor", "dtype": "float32"}]},
     "parameter 'x': a tensor parameter needs a 'shape' list"),
    ({"name": "axpy", "params": [tensor("x", "float32", ["K"])]},
     "parameter 'x': shape entry 'K' reads 'K', which is not an integer scalar"),
    ({"name": "axpy", "params": [scalar("a", "float32"), tensor("x", "float32", ["a"])]},
     "reads 'a', which is not an integer scalar"),
    ({"name": "axpy", "params": [scalar("N"), tensor("x", "float32", ["__import__('os').getpid()"])]},
     "parameter 'x': shape entry \"__import__('os').getpid()\" uses"),
    ({"name": "axpy", "params": [scalar("N"), tensor("x", "float32", ["N ** 2"])]}, "uses 'N ** 2'"),
    ({"name": "axpy", "params": [scalar("N"), tensor("x", "float32", ["N +"])]}, "is not an expression"),
    ({"name": "axpy", "params": [tensor("x", "float32", [-1])]}, "shape entry -1 is negative"),
    ({"name": "axpy", "params": [tensor("x", "float32", [1.5])]}, "must be an int or a string"),
    ({"name": "axpy", "params": [tensor("x", "float32", ["4 // 0"])]}, "divides by zero"),
    ({"name": "axpy", "params": [{"name": "y", "kind": "pointer", "dtype": "float32", "written": "yes"}]},
     "'written' must be true or false"),
]


@pytest.mark.parametrize("signature, message", BAD_SIGNATURES, ids=[m for _, m in BAD_SIGNATURES])
def test_malformed_signatures_raise_load_error(built, signature, message):
    with pytest.raises(LoadError) as info:
        load_module(built, [signature])
    assert message in str(info.value)


def test_duplicate_kernel_signatures(built):
    with pytest.raises(LoadError, match="axpy have more than one signature"):
        load_module(built, [SIGNATURES[0], SIGNATURES[0]])


def test_constant_expression_and_whitespace_dims(built):
    sig = {"name": "blocksum", "params": [scalar("N"), tensor("x", "float32", [" (N + 3) // 4 ", "2 * 2"]),
                                          tensor("y", "float32", ["(N+3)//4"], written=True)]}
    mod = load_module(built, [sig])
    x, y = f32(2, 4), np.zeros(2, dtype=np.float32)
    mod.blocksum(8, x, y)
    np.testing.assert_array_equal(y, x.sum(axis=1))
    assert "x: float32[(N + 3) // 4, 4]" in repr(mod.blocksum)


def test_two_loads_of_one_library_are_independent(built):
    first = load_module(built, SIGNATURES)
    second = load_module(built, [SIGNATURES[0]])
    check_usable(first)
    check_usable(second)
    assert "matmul" not in second and isinstance(second.axpy, Kernel)


def test_functions_are_resolved_by_ctypes_with_argtypes(module):
    fn = module.axpy._function
    assert fn.argtypes == [ctypes.c_int32, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p]
    assert fn.restype is None
