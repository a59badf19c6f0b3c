"""ONNX Attention (opset 23) as taskloom's fused attention: 4-d and 3-d inputs, grouped
keys and values, float and bool masks, causal, against ONNX Runtime; a key cache is refused
with the node named."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

import taskloom.onnx  # noqa: E402
from taskloom.errors import FrontendError  # noqa: E402

rng = np.random.default_rng(0)


def model(shapes, attrs, mask=None, extra=()):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip("QKV", shapes)]
    names = ["Q", "K", "V"]
    if mask is not None:
        shape, code = mask
        ins.append(helper.make_tensor_value_info("M", code, shape))
        names.append("M")
    for name, shape in extra:
        ins.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        names.append(name)
    node = helper.make_node("Attention", names, ["Y"], **attrs)
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("shapes, attrs, mask", [
    ([(2, 4, 10, 8), (2, 4, 12, 8), (2, 4, 12, 8)], {}, None),
    ([(2, 4, 10, 8), (2, 2, 12, 8), (2, 2, 12, 8)], {"scale": 0.3}, ((2, 1, 10, 12), TensorProto.FLOAT)),  # grouped
    ([(1, 4, 9, 8), (1, 4, 9, 8), (1, 4, 9, 6)], {"is_causal": 1}, None),
    ([(2, 9, 32), (2, 11, 16), (2, 11, 16)], {"q_num_heads": 4, "kv_num_heads": 2}, ((9, 11), TensorProto.BOOL)),
])
def test_matches_onnx_runtime(shapes, attrs, mask):
    m = model(shapes, attrs, mask)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip("QKV", shapes)}
    if mask is not None:
        shape, code = mask
        feeds["M"] = rng.standard_normal(shape).astype(np.float32) if code == TensorProto.FLOAT else \
            np.concatenate([np.ones(shape[:-1] + (1,), bool), rng.random(shape[:-1] + (shape[-1] - 1,)) < 0.6], -1)
    want = ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
    compiled = taskloom.onnx.from_onnx(m)
    np.testing.assert_allclose(compiled(*feeds.values()), want, rtol=1e-5, atol=1e-5)
    assert any(k["schedule"].startswith("attention_cpu") for k in compiled.meta["kernels"])


def test_a_key_cache_is_refused():
    m = model([(1, 2, 4, 8)] * 3, {}, ((1, 1, 4, 4), TensorProto.FLOAT), extra=[("PK", (1, 2, 3, 8))])
    with pytest.raises(FrontendError, match=r"input 4 \(past_key\) is not supported"):
        taskloom.onnx.from_onnx(m)
