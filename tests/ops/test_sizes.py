"""A tensor with more elements than a kernel can index (2**31 - 1) is an OpError when an
operator is applied, traced or eager, never a kernel that faults."""
from __future__ import annotations

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.errors import OpError
from taskloom.graph import input
from taskloom.ops.base import MAX_ELEMENTS


def test_a_traced_result_past_the_limit_is_refused():
    x = input((2 ** 20, 2 ** 10), dtype="bool", name="x")
    y = ops.logical_not(x)  # 2**30 elements: fine
    with pytest.raises(OpError, match=r"tile\(\): its result.*2,147,483,648 elements.*at most 2,147,483,647"):
        ops.tile(y, (2, 1))
    with pytest.raises(OpError, match="10,000,000,000,000"):
        ops.relu(input((10 ** 6, 10 ** 7), name="big"))  # an input past the limit


def test_an_eager_result_past_the_limit_is_refused_before_it_is_allocated():
    x = taskloom.asarray(np.zeros((1, 1), np.float32))
    with pytest.raises(OpError, match="32-bit"):
        ops.broadcast_to(x, (2 ** 16, 2 ** 16))
    assert MAX_ELEMENTS == 2 ** 31 - 1
