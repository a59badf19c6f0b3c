"""The official ONNX backend node tests (``onnx.backend.test``, shipped inside the onnx
package) run against taskloom through ``from_onnx``.

Selected: every node test whose operators all have a converter in
``taskloom.frontend.onnx.REGISTRY``. Of those, tests whose tensors use an element type
taskloom lacks (uint16/32/64, bfloat16 data, strings, float8/float4/int4...) and the ones
listed in ``EXCLUDED`` with their reasons are skipped. A representative subset (the first
test of each operator) runs by default; the whole selection is marked ``slow``:

    .venv/bin/pytest tests/frontend/test_onnx_backend.py -m slow -q -n auto
"""
from __future__ import annotations

import re
import unittest
import warnings
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx.backend.base import Backend, BackendRep  # noqa: E402

from taskloom.errors import FrontendError  # noqa: E402
from taskloom.frontend.onnx import REGISTRY, from_onnx  # noqa: E402
from taskloom.frontend.onnx_registry import ONNX_DTYPES  # noqa: E402

# Tests that fail for reasons outside the converters, each with its reason.
EXCLUDED: dict[str, str] = {
    r"^test_training_dropout(_default|_mask|_default_mask|)_cpu$": "training mode (random dropout)",
    r"^test_batchnorm_.*training_mode": "training mode (batch statistics)",
    r"^test_maxpool_with_argmax": "MaxPool's Indices output",
    r"^test_(max|average)pool_3d": "3-d pooling (taskloom has 1-d and 2-d)",
    r"^test_averagepool_2d_dilations": "dilated average pooling (taskloom's avg_pool2d has no dilation)",
    r"^test_maxpool_2d_uint8": "integer max pooling (taskloom's max_pool2d is float-only)",
    r"^test_identity_(sequence|opt)": "sequence and optional types",
    r"^test_attention_4d_causal_fp16_expanded": "float16 rounding: fused intermediates stay in float32, "
                                                 "the reference rounds after every operator (2 ulps)",
    r"^test_attention_.*(past_and_present|softcap|qk_matmul|nonpad|window|padded_kv)(?!.*_expanded)":
        "Attention with a key cache, softcap, the QK output, unpadded lengths or windows (refused)",
    r"^test_resize_.*cubic": "cubic interpolation (Resize takes nearest and linear)",
    r"^test_resize_.*antialias": "antialiased Resize",
    r"^test_resize_tf_crop_and_resize": "Resize's tf_crop_and_resize (a region of interest)",
    r"^test_resize_.*nearest_not_(larger|smaller)": "Resize's keep_aspect_ratio_policy other than stretch",
    r"^test_resize_downsample_scales_linear_align_corners_cpu$":
        "ONNX Runtime gives [1, 4] here, as taskloom does; the reference 3.14 (its align_corners divides by "
        "the unrounded output length)",
}

# Tests that fail today for reasons outside the ONNX frontend: expected to fail (not strict,
# so a fix shows up as XPASS).
KNOWN_FAILURES: dict[str, str] = {
    r"^test_mod_float_edge_cases_fmod_0": "Python-style float modulo at inf divisors and signed zeros",
}

_UNSUPPORTED_TYPES = {c for c in range(1, 40) if c not in ONNX_DTYPES} | {16}  # bfloat16: no numpy type


def _element_types(model: Any) -> set[int]:
    """Every element type a test model names: inputs, outputs, initializers, Cast targets."""
    g = model.graph
    codes = {vi.type.tensor_type.elem_type for vi in (*g.input, *g.output, *g.value_info)
             if vi.type.HasField("tensor_type")}
    codes |= {vi.type.sequence_type.elem_type.tensor_type.elem_type or 8 for vi in (*g.input, *g.output)
              if vi.type.HasField("sequence_type")}
    codes |= {t.data_type for t in g.initializer}
    for node in g.node:
        for a in node.attribute:
            if a.name == "to":
                codes.add(a.i)
            if a.type == onnx.AttributeProto.TENSOR:
                codes.add(a.t.data_type)
    return codes


def _select() -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(selected test names, test name -> its operator type, skipped test name -> reason)."""
    from onnx.backend.test.loader import load_model_tests
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    selected, op_of, skipped = [], {}, {}
    for case in sorted(cases, key=lambda c: c.name):
        nodes = case.model.graph.node
        if not nodes or any(n.domain not in ("", "ai.onnx") or n.op_type not in REGISTRY for n in nodes):
            continue
        name = f"{case.name}_cpu"
        selected.append(name)
        op_of[name] = nodes[-1].op_type if not case.name.endswith("_expanded") else "expanded functions"
        bad = _element_types(case.model) & _UNSUPPORTED_TYPES
        if bad:
            skipped[name] = "element type taskloom lacks: " + ", ".join(
                onnx.TensorProto.DataType.Name(c) for c in sorted(bad))
            continue
        for pattern, reason in EXCLUDED.items():
            if re.search(pattern, name):
                skipped[name] = reason
                break
    return selected, op_of, skipped


class TaskloomRep(BackendRep):
    """A converted model. Inputs that the converters need as constants (a Reshape's shape,
    Slice bounds, reduction axes given as model inputs) are fixed to the values of the
    first call, as ``from_onnx(..., constants=...)`` does; the model is compiled again
    for other values."""

    def __init__(self, model: Any):
        self.model = model
        initialized = {t.name for t in model.graph.initializer}
        self.input_names = [vi.name for vi in model.graph.input if vi.name not in initialized]
        self.fixed: list[str] = []
        self.compiled: dict[bytes, Any] = {}
        try:
            self.compiled[b""] = from_onnx(model)
        except FrontendError as e:
            if not getattr(e, "constant_inputs", None):
                raise
            self.fixed = list(e.constant_inputs)  # type: ignore[attr-defined]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        given = dict(zip(self.input_names, (np.asarray(x) for x in inputs)))
        while True:
            fixed = {k: given[k] for k in self.fixed}
            key = b"".join(fixed[k].tobytes() + str(fixed[k].shape).encode() for k in self.fixed)
            if key in self.compiled:
                break
            try:
                self.compiled[key] = from_onnx(self.model, constants=fixed)
                break
            except FrontendError as e:  # a converter may ask for one more input once the first is fixed
                more = [k for k in getattr(e, "constant_inputs", []) if k not in self.fixed]
                if not more:
                    raise
                self.fixed += more
        out = self.compiled[key](*(v for k, v in given.items() if k not in fixed))
        return tuple(out) if isinstance(out, tuple) else (out,)


class TaskloomBackend(Backend):
    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> TaskloomRep:
        super().prepare(model, device, **kwargs)
        return TaskloomRep(model)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


def _test_classes() -> dict[str, type]:
    selected, op_of, skipped = _select()
    runner = onnx.backend.test.BackendTest(TaskloomBackend, __name__)
    runner.include("^(" + "|".join(re.escape(n) for n in selected) + ")$")
    node_cases = runner.test_cases["OnnxBackendNodeModelTest"]
    methods = {n: getattr(node_cases, n) for n in selected}
    for name, reason in skipped.items():
        methods[name] = unittest.skip(reason)(methods[name])
    for name in selected:
        for pattern, reason in KNOWN_FAILURES.items():
            if name not in skipped and re.search(pattern, name):
                methods[name] = pytest.mark.xfail(reason=reason, strict=False)(methods[name])
    # the first runnable test of each operator runs by default; all of them under -m slow
    fast: dict[str, Any] = {}
    for name in selected:
        if name not in skipped and op_of[name] not in {op_of[f] for f in fast}:
            fast[name] = methods[name]
    slow = {n: m for n, m in methods.items() if n not in fast}
    return {"TestOnnxNodeRepresentative": type("TestOnnxNodeRepresentative", (unittest.TestCase,), fast),
            "TestOnnxNodeAll": pytest.mark.slow(type("TestOnnxNodeAll", (unittest.TestCase,), slow))}


globals().update(_test_classes())
