"""ops.attention against torch's scaled_dot_product_attention: masks, causal, scale,
broadcast batch axes, half precision; its errors name the argument."""
from __future__ import annotations

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.errors import OpError

torch = pytest.importorskip("torch")
rng = np.random.default_rng(0)


def arr(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def sdpa(q, k, v, **kw):
    t = {key: torch.from_numpy(val) if isinstance(val, np.ndarray) else val for key, val in kw.items()}
    return torch.nn.functional.scaled_dot_product_attention(torch.from_numpy(q), torch.from_numpy(k),
                                                            torch.from_numpy(v), **t).numpy()


@pytest.mark.parametrize("case", ["plain", "float_mask", "bool_mask", "causal", "scale", "broadcast"])
def test_matches_torch(case):
    q, k, v = arr(2, 3, 5, 8), arr(2, 3, 7, 8), arr(2, 3, 7, 4)
    kw, tkw = {}, {}
    if case == "float_mask":
        m = arr(1, 1, 5, 7)
        kw, tkw = {"mask": taskloom.asarray(m)}, {"attn_mask": m}
    elif case == "bool_mask":
        m = rng.random((5, 7)) > 0.3
        m[:, 0] = True
        kw, tkw = {"mask": taskloom.asarray(m)}, {"attn_mask": m}
    elif case == "causal":
        kw, tkw = {"causal": True}, {"is_causal": True}
    elif case == "scale":
        kw, tkw = {"scale": 0.3}, {"scale": 0.3}
    elif case == "broadcast":
        k, v = arr(1, 3, 7, 8), arr(2, 1, 7, 4)  # batch axes broadcast
    got = ops.attention(*(taskloom.asarray(x) for x in (q, k, v)), **kw).numpy()
    want = sdpa(q, np.broadcast_to(k, (2, 3, 7, 8)).copy(), np.broadcast_to(v, (2, 3, 7, 4)).copy(), **tkw)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_half_precision_sums_in_float32():
    q, k, v = (arr(1, 64, 16, dtype=np.float16) for _ in range(3))
    got = ops.attention(*(taskloom.asarray(x) for x in (q, k, v))).numpy()
    want = sdpa(*(x.astype(np.float32) for x in (q, k, v)))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("args, match", [
    (dict(q=(4, 8), k=(5, 6), v=(5, 3)), "'q' has 8 features and 'k' 6"),
    (dict(q=(4, 8), k=(5, 8), v=(6, 3)), "'k' has 5 keys and 'v' 6"),
    (dict(q=(8,), k=(5, 8), v=(5, 3)), "'q' must have at least 2 axes"),
])
def test_errors_name_the_argument(args, match):
    with pytest.raises(OpError, match=match):
        ops.attention(*(taskloom.asarray(arr(*args[n])) for n in ("q", "k", "v")))


def test_bad_options_are_errors():
    q = taskloom.asarray(arr(4, 8))
    with pytest.raises(OpError, match="'causal' must be True or False"):
        ops.attention(q, q, q, causal=1)
    with pytest.raises(OpError, match="'scale' must be a finite number"):
        ops.attention(q, q, q, scale=float("nan"))
    with pytest.raises(OpError, match="'mask' must be bool"):
        ops.attention(q, q, q, mask=taskloom.asarray(np.zeros((4, 4), np.int32)))
