"""Shared helpers of the graph-pass tests: constants, traced tasks, and the check that a
pass keeps the numbers a compiled graph computes."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

import taskloom
from taskloom.graph import Graph, input
from taskloom.ir.compute import Task

rng = np.random.default_rng(0)


def const(*shape: int, dtype: str = "float32") -> taskloom.Tensor:
    """A random constant (normal values, or small integers for integer dtypes)."""
    if np.dtype(dtype).kind in "iu":
        return taskloom.asarray(rng.integers(-5, 5, shape).astype(dtype))
    return taskloom.asarray(rng.standard_normal(shape).astype(dtype))


def filled(shape: tuple[int, ...], value: float, dtype: str = "float32") -> taskloom.Tensor:
    return taskloom.asarray(np.full(shape, value, dtype=dtype))


def ops_of(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def traced_task(fn: Callable[..., Any], *shapes: tuple[int, ...]) -> Task:
    """The task ``fn`` records when applied to data-less inputs of ``shapes`` (float32)."""
    out = fn(*(input(s) for s in shapes))
    out = out[0] if isinstance(out, (list, tuple)) else out
    return out.producer[0].task


def random_inputs(graph: Graph) -> list[np.ndarray]:
    arrays = []
    for t in graph.inputs:
        dt = t.dtype.numpy
        if np.dtype(dt).kind in "iu":
            arrays.append(rng.integers(-5, 5, t.shape).astype(dt))
        else:
            arrays.append(rng.standard_normal(t.shape).astype(dt))
    return arrays


def assert_same_results(original: Graph, optimized: Graph, rtol: float = 1e-5, atol: float = 1e-5,
                        fuse_original: bool = True) -> None:
    """Compiles both graphs and checks they give the same outputs on random inputs."""
    assert optimized.inputs == original.inputs
    arrays = random_inputs(original)
    want = taskloom.compile(original, fuse=fuse_original)(*arrays)
    got = taskloom.compile(optimized)(*arrays)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
