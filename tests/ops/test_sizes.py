"""Tensors past 2**31 - 1 elements are indexed with 64-bit integers, so they compute the
right answer; a tensor no machine could hold (more than MAX_BYTES, or an element count past
int64) is an OpError when an operator is applied, and one this machine cannot hold is an
AllocationError when it is allocated -- never a fault. The fast tests read the generated C;
the one that runs 2**31 + elements is marked slow (2 GiB of bools in, 2 GiB out)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.errors import AllocationError, OpError
from taskloom.graph import Graph, input
from taskloom.ir import dtypes as T
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.functor import collect
from taskloom.ops.base import MAX_BYTES
from taskloom.transforms import lower

BIG_1D = 2_147_484_000  # past 2**31 - 1: int32 positions would wrap


def kernel_source(model) -> str:
    src = open(model.meta["source"]).read()
    return src[src.index("\nvoid k0"):src.index("void taskloom_set_num_threads")]


@pytest.mark.parametrize("shape,wide", [((BIG_1D,), True), ((65536, 65536), True), ((300, 7), False)])
def test_index_arithmetic_is_64_bit_exactly_where_a_tensor_needs_it(shape, wide):
    x = input(shape, dtype="bool", name="x")
    src = kernel_source(taskloom.compile(Graph([x], [ops.logical_not(x)])))
    assert ("int64_t" in src) == wide, src
    if shape == (BIG_1D,):  # the block's start is a 64-bit product, not an int32 that wraps
        assert re.search(r"const int64_t start = \(int64_t\)blk \* INT64_C\(4096\)", src), src


def test_symbolic_buffers_of_several_dimensions_get_64_bit_offsets():
    """An int32 size alone cannot pass 2**31 - 1; a product of two can."""
    n, m = E.var("n"), E.var("m")
    A, B = E.Var("A", T.float32[n, m]), E.Var("B", T.float32[n])
    i, j = E.var("i"), E.var("j")
    body = S.For(i, n, S.seq([S.For(j, m, S.store(A[i, j], B[i]))]))
    low = lower(S.Function("copy", (n, m, A, B), body))
    offsets = {el.tensor.name: el.indices[0].type for el in collect(low, (E.TensorElement, S.BufferStore))}
    assert offsets == {"A": T.int64, "B": T.int32}


def test_a_tensor_no_machine_holds_is_refused_when_traced():
    with pytest.raises(OpError, match=r"relu\(\): 'x'.*4,000,000,000,000,000 bytes.*at most"):
        ops.relu(input((10 ** 6, 10 ** 7, 100), name="big"))
    y = input((2 ** 20, 2 ** 20), dtype="int8", name="y")  # 1 TiB: allowed, if not allocated
    with pytest.raises(OpError, match=r"tile\(\): its result"):
        ops.tile(y, (2 ** 40, 1))  # 2**80 elements: past int64 too
    assert MAX_BYTES == 2 ** 47


def test_an_arena_larger_than_memory_is_an_allocation_error():
    """10**12 float32 intermediates (4 TB) compile; their arena cannot be allocated."""
    x = input((10 ** 6, 10 ** 6), name="x")
    y = ops.relu(x)
    with pytest.raises(AllocationError, match="arena"):
        taskloom.compile(Graph([x], [ops.add(y, 1.0), ops.mul(y, 2.0)]))


def test_an_eager_result_larger_than_memory_is_an_allocation_error():
    x = taskloom.asarray(np.zeros((1, 1), np.float32))
    with pytest.raises(AllocationError, match="broadcast_to"):
        ops.broadcast_to(x, (10 ** 6, 10 ** 6))


@pytest.mark.slow
def test_a_bool_not_past_2_31_elements_is_right_eager_and_compiled():
    x = np.zeros(BIG_1D, dtype=bool)
    x[[0, 2 ** 31 - 1, 2 ** 31, BIG_1D - 1]] = True
    y = ops.logical_not(taskloom.asarray(x)).numpy()
    assert not y[[0, 2 ** 31 - 1, 2 ** 31, BIG_1D - 1]].any() and int(y.sum()) == BIG_1D - 4
    del y
    g = input((BIG_1D,), dtype="bool", name="x")
    y = taskloom.compile(Graph([g], [ops.logical_not(g)]))(x)
    assert not y[[0, 2 ** 31 - 1, 2 ** 31, BIG_1D - 1]].any() and int(y.sum()) == BIG_1D - 4
