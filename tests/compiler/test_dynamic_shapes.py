"""Graphs with symbolic dimensions: one compile serves every size, checked per call."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import taskloom
from taskloom import ops
from taskloom.backend.launcher import Call, Dispatch, Ref, launcher_source
from taskloom.compiler import dynamic
from taskloom.compiler.drivers import schedule_kernel
from taskloom.compiler.dynamic import choose_variants, ladder
from taskloom.compiler.passes import optimize
from taskloom.errors import ArgumentError
from taskloom.graph import Graph
from taskloom.graph.fusion import fuse_graph
from taskloom.graph.graph import GraphError
from taskloom.graph.tensor import Tensor, symbol
from taskloom.ir import dtypes as T
from taskloom.schedule.select import find_candidate
from taskloom.target import host_target

RNG = np.random.default_rng(7)
W = (RNG.standard_normal((48, 32)) * 0.2).astype(np.float32)
BIAS = RNG.standard_normal(48).astype(np.float32)


def _mlp_graph() -> Graph:
    """linear + relu, then softmax and a row mean: symbolic batch and sequence."""
    x = Tensor((symbol("batch"), symbol("seq"), 32), T.float32, name="x")
    y = ops.softmax(ops.relu(ops.linear(x, taskloom.asarray(W), taskloom.asarray(BIAS))), -1)
    return Graph([x], [y, ops.mean(y, -1)])


def _mlp_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = np.maximum(x @ W.T + BIAS, 0)
    e = np.exp(h - h.max(-1, keepdims=True))
    y = e / e.sum(-1, keepdims=True)
    return y, y.mean(-1)


@pytest.fixture(scope="module")
def mlp():
    return taskloom.compile(_mlp_graph(), dynamic={"batch": (1, 16), "seq": (1, 512)})


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 16), st.integers(1, 300))
def test_one_compile_serves_every_size(mlp, batch, seq):
    x = RNG.standard_normal((batch, seq, 32)).astype(np.float32)
    y, m = mlp(x)
    ry, rm = _mlp_reference(x)
    assert y.shape == (batch, seq, 48) and m.shape == (batch, seq)
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m, rm, rtol=1e-5, atol=1e-6)


def test_the_arena_grows_and_smaller_calls_stay_right(mlp):
    big, small = (RNG.standard_normal(s).astype(np.float32) for s in ((16, 500, 32), (1, 3, 32)))
    mlp(big)
    grown = mlp.arena_bytes
    assert grown >= 16 * 500 * 48 * 4
    np.testing.assert_allclose(mlp(small)[0], _mlp_reference(small)[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mlp(big)[0], _mlp_reference(big)[0], rtol=1e-5, atol=1e-6)
    assert mlp.arena_bytes == grown


def test_a_symbolic_reshape_after_a_matmul_joins_its_epilogue():
    # as torch lowers a linear layer: [b, s, 32] viewed as [b*s, 32], a matmul, viewed back
    b, s = symbol("batch"), symbol("seq")
    x = Tensor((b, s, 32), T.float32, name="x")
    h = ops.matmul(ops.reshape(x, (b * s, 32)), taskloom.asarray(np.ascontiguousarray(W.T)))
    y = ops.relu(ops.add(ops.reshape(h, (b, s, 48)), taskloom.asarray(BIAS)))
    compiled = taskloom.compile(Graph([x], [y]), dynamic={"batch": (1, 8), "seq": (1, 64)})
    assert [k["ops"] for k in compiled.meta["kernels"]] == [["reshape", "matmul", "reshape", "add", "relu"]]
    for shape in ((3, 7, 32), (1, 64, 32), (8, 1, 32)):
        xv = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(compiled(xv), np.maximum(xv @ W.T + BIAS, 0), rtol=1e-5, atol=1e-5)


def test_meta_records_symbols_and_ranges(mlp):
    assert mlp.symbols == {"batch": (1, 16), "seq": (1, 512)}
    assert mlp.inputs[0]["shape"] == ["batch", "seq", 32]
    assert mlp.outputs[0]["shape"] == ["batch", "seq", 48]


def test_torch_tensors_in_and_out(mlp):
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 5, 32)
    y, _ = mlp(x)
    assert isinstance(y, torch.Tensor) and tuple(y.shape) == (2, 5, 48)
    np.testing.assert_allclose(y.numpy(), _mlp_reference(x.numpy())[0], rtol=1e-5, atol=1e-6)


def test_a_size_out_of_range_names_the_input_and_the_range(mlp):
    with pytest.raises(ArgumentError, match=r"input 'x' dimension 0 is batch=17; .*batch from 1 to 16"):
        mlp(np.zeros((17, 4, 32), np.float32))


def test_a_static_dimension_is_still_checked(mlp):
    with pytest.raises(ArgumentError, match=r"input 'x' dimension 2 must be 32, got shape \(2, 3, 31\)"):
        mlp(np.zeros((2, 3, 31), np.float32))
    with pytest.raises(ArgumentError, match=r"input 'x' must have 3 dimensions \(batch, seq, 32\)"):
        mlp(np.zeros((2, 32), np.float32))


def test_inputs_that_disagree_on_a_symbol_are_named():
    b = symbol("batch")
    x, m = Tensor((b, 8), T.float32, name="x"), Tensor((b, 8), T.float32, name="mask")
    compiled = taskloom.compile(Graph([x, m], [ops.add(x, m)]))
    np.testing.assert_array_equal(compiled(np.ones((3, 8), np.float32), np.ones((3, 8), np.float32)), 2)
    with pytest.raises(ArgumentError, match=r"input 'mask' dimension 0 is batch=4, but input 'x' "
                                            r"dimension 0 gave batch=3"):
        compiled(np.ones((3, 8), np.float32), np.ones((4, 8), np.float32))


def test_output_sizes_may_be_expressions_of_the_symbols():
    s = symbol("seq")
    x = Tensor((s, 4), T.float32, name="x")
    compiled = taskloom.compile(Graph([x], [ops.concat([x, ops.mul(x, 2.0)], axis=0)]))
    assert compiled.outputs[0]["shape"] == ["seq * 2", 4]
    v = RNG.standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(compiled(v), np.concatenate([v, 2 * v]))


def test_save_and_load_keep_the_symbols(mlp, tmp_path):
    mlp.save(tmp_path / "mlp.tl")
    loaded = taskloom.load(tmp_path / "mlp.tl")
    assert loaded.symbols == mlp.symbols
    x = RNG.standard_normal((3, 11, 32)).astype(np.float32)
    np.testing.assert_array_equal(loaded(x)[0], mlp(x)[0])
    with pytest.raises(ArgumentError, match="batch from 1 to 16"):
        loaded(np.zeros((20, 1, 32), np.float32))


def test_a_symbol_no_input_gives_whole_is_refused():
    s = symbol("seq")
    x = Tensor((s + 1, 4), T.float32, name="x")
    with pytest.raises(GraphError, match="seq is no whole dimension of any input"):
        taskloom.compile(Graph([x], [ops.relu(x)]))


def test_ranges_are_checked_at_compile_time():
    with pytest.raises(GraphError, match="ranges are given for tokens, which is not a symbol"):
        taskloom.compile(_mlp_graph(), dynamic={"tokens": (1, 8)})
    with pytest.raises(GraphError, match=r"the range of batch is \(8, 2\)"):
        taskloom.compile(_mlp_graph(), dynamic={"batch": (8, 2)})


def test_a_cuda_target_compiles_the_dynamic_graph_once(mlp):
    """(tests/compiler/test_cuda_dynamic.py holds the CUDA path's own tests.)"""
    on_gpu = taskloom.compile(_mlp_graph(), target="cuda:sm_90", device="emulator",
                              dynamic={"batch": (1, 16), "seq": (1, 512)})
    x = RNG.standard_normal((3, 11, 32)).astype(np.float32)
    for got, want in zip(on_gpu(x), mlp(x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_tensors_past_32_bit_indexing_are_refused_per_call():
    n = symbol("n")
    x = Tensor((n, 1), T.float32, name="x")
    compiled = taskloom.compile(Graph([x], [ops.expand(x, (n, 4096))]))
    with pytest.raises(ArgumentError, match="more elements than the 2,147,483,647"):
        compiled(np.zeros((2 ** 20, 1), np.float32))


def test_reshape_keeps_symbolic_sizes():
    b, s = symbol("batch"), symbol("seq")
    x = Tensor((b, s, 12), T.float32, name="x")
    heads = ops.permute(ops.reshape(x, (b, s, 3, 4)), (0, 2, 1, 3))
    flat = ops.reshape(x, (-1, 12))
    compiled = taskloom.compile(Graph([x], [heads, flat]))
    assert compiled.outputs[1]["shape"] == ["batch * seq", 12]
    v = RNG.standard_normal((2, 5, 12)).astype(np.float32)
    h, f = compiled(v)
    np.testing.assert_array_equal(h, v.reshape(2, 5, 3, 4).transpose(0, 2, 1, 3))
    np.testing.assert_array_equal(f, v.reshape(-1, 12))


# -- configs per range of sizes ------------------------------------------------------------

def test_ladders_sample_each_range():
    assert ladder(1, 2 ** 31 - 1) == [1, 8, 64, 512, 4096]
    assert ladder(1, 100) == [1, 8, 64, 100]
    assert ladder(3, 5) == [3, 5]
    assert ladder(0, 0) == [1]


def test_variants_keep_the_most_chosen_configs_and_map_the_rest_to_a_neighbour(monkeypatch):
    monkeypatch.setattr(dynamic, "MAX_VARIANTS", 2)
    kept, table = choose_variants(["a", "a", "b", "c", "b", "b"])
    assert kept == ["a", "b"] and table == [0, 0, 1, 1, 1, 1]
    assert choose_variants(["x"] * 4) == (["x"], [0, 0, 0, 0])


def test_a_variant_is_built_only_where_the_model_says_it_pays():
    # points 0-1 choose "a", 2-3 choose "b", point 4 "c"; seconds per (point, config):
    seconds = {"a": [1.0, 1.0, 1.02, 1.5, 9.0], "b": [1.3, 1.2, 1.0, 1.0, 9.0], "c": [2.0, 2.0, 2.0, 2.0, 1.0]}
    configs = ["a", "a", "b", "b", "c"]
    kept, table = choose_variants(configs, lambda k, c: seconds[c][k])
    assert kept == ["a", "b", "c"] and table == [0, 0, 1, 1, 2]
    seconds["c"][4] = 8.8  # "c" now gains under 5% at its one point: it is not built
    kept, table = choose_variants(configs, lambda k, c: seconds[c][k])
    assert kept == ["a", "b"] and table == [0, 0, 1, 1, 0]  # at point 4, a tie: the first
    seconds["b"][3] = 1.45  # nor is "b"
    assert choose_variants(configs, lambda k, c: seconds[c][k]) == (["a"], [0] * 5)


def test_the_fewest_variants_within_the_gain_and_of_those_the_least_worst_point():
    # "big" is the own choice at points 0-4, "mid" at point 5; each alone keeps every point
    # within VARIANT_GAIN (5%), "big" losing less in total, "mid" less at its worst point
    seconds = {"big": [1.0] * 5 + [1.04], "mid": [1.03] * 5 + [1.0]}
    configs = ["big"] * 5 + ["mid"]
    assert choose_variants(configs, lambda k, c: seconds[c][k]) == (["mid"], [0] * 6)
    seconds["mid"] = [1.06] * 5 + [0.98]  # now each alone leaves some point past the gain
    assert choose_variants(configs, lambda k, c: seconds[c][k]) == (["big", "mid"], [0] * 5 + [1])


def test_a_dispatch_runs_the_variant_the_call_picks():
    calls = (Call("k1", (Ref("in", 0), Ref("slot", 0), Ref("sym", 1)), status=True), Call("k1_v1", (Ref("in", 0),)))
    text = launcher_source([Dispatch(0, calls, "linear")], dynamic=True)
    assert "const int64_t* sym, const int64_t* off, const int64_t* var)" in text
    assert ("  switch (var[0]) {\n"
            "    case 1: k1_v1(in[0]); break;\n"
            "    default: k1(in[0], (void*)(arena + off[0]), sym[1], st); if (st->check) return;\n"
            "  }") in text


def test_matmuls_with_symbolic_rows_build_variants_and_each_is_right():
    """A linear layer with symbolic rows gets the matmul template in a variant per config the
    model picks over the ladder of sizes (16 rows and 4096 want different grids), those that
    serve a few rows with a tile for each count of last rows; whichever a call runs, the
    numbers are numpy's."""
    rows = symbol("rows")
    x = Tensor((rows, 256), T.float32, name="x")
    w = (RNG.standard_normal((512, 256)) * 0.05).astype(np.float32)
    compiled = taskloom.compile(Graph([x], [ops.linear(x, taskloom.asarray(w))]))
    (kernel,) = compiled.meta["kernels"]
    schedules = kernel["schedule"].split("; ")
    assert len(schedules) >= 2 and all(s.startswith("matmul_cpu") for s in schedules)
    assert len(compiled.meta["dynamic"]["variants"]) == 1
    assert any("exact last rows" in s for s in schedules)
    for n in (1, 7, 9, 21, 70, 600, 5000):
        v = RNG.standard_normal((n, 256)).astype(np.float32)
        np.testing.assert_allclose(compiled(v), v @ w.T, rtol=1e-4, atol=1e-4)
    # a range of thousands of rows only: no variant serves a few, none carries the code
    many = taskloom.compile(Graph([x], [ops.linear(x, taskloom.asarray(w))]), dynamic={"rows": (2000, 9000)})
    assert "exact last rows" not in many.meta["kernels"][0]["schedule"]
    v = RNG.standard_normal((2003, 256)).astype(np.float32)
    np.testing.assert_allclose(many(v), v @ w.T, rtol=1e-4, atol=1e-4)


def test_exact_last_rows_carry_the_fused_epilogue_at_every_count():
    """The exact-rows variant sums a block's last rows in the tile of their count and stores
    them in one loop, where fusion puts the epilogue (bias, residual, relu); with K in several
    blocks the partial sums pass through that loop too. Every count of last rows a tile can
    leave is checked against numpy."""
    rows = symbol("rows")
    x, r = Tensor((rows, 1024), T.float32, name="x"), Tensor((rows, 40), T.float32, name="r")
    w = (RNG.standard_normal((40, 1024)) * 0.03).astype(np.float32)
    b = RNG.standard_normal(40).astype(np.float32)
    y = ops.relu(ops.add(ops.linear(x, taskloom.asarray(w), taskloom.asarray(b)), r))
    compiled = taskloom.compile(Graph([x, r], [y]), dynamic={"rows": (1, 64)})
    assert any("exact last rows" in s for k in compiled.meta["kernels"] for s in k["schedule"].split("; "))
    for n in range(1, 30):
        xv, rv = RNG.standard_normal((n, 1024)).astype(np.float32), RNG.standard_normal((n, 40)).astype(np.float32)
        np.testing.assert_allclose(compiled(xv, rv), np.maximum(xv @ w.T + b + rv, 0), rtol=1e-4, atol=1e-4)


def test_a_kernel_bound_at_a_point_is_the_static_kernel_of_that_shape():
    """``bind_sizes`` fixes a symbolic kernel's size parameters: what is left are tensors of
    static shapes, and no symbol remains in the code (the notes keep the shape it was made for)."""
    from taskloom.compiler.dynamic import bind_sizes
    from taskloom.ir.expr import Var
    from taskloom.ir.functor import collect
    rows = symbol("rows")
    x = Tensor((rows, 256), T.float32, name="x")
    w = (RNG.standard_normal((512, 256)) * 0.05).astype(np.float32)
    (group,) = fuse_graph(optimize(Graph([x], [ops.relu(ops.linear(x, taskloom.asarray(w)))])))
    fn = schedule_kernel(group.task, host_target()).fn
    assert any(p.name == "rows" for p in fn.params)
    bound = bind_sizes(fn, {"rows": 21})
    assert [p.type.static_shape() for p in bound.params] == [(21 * 256,), (512 * 256,), (21 * 512,)]
    assert "rows" not in {v.name for v in collect(bound.body, Var)}


def test_tuning_a_symbolic_product_measures_each_sample_point_and_records_it(tmp_path, monkeypatch):
    """At ``tune=1`` a matmul with symbolic rows is timed at each sample point (its own
    kernel, sizes bound, exact last rows where they will run), under a record key per point;
    each point's variant is what measured fastest there (the fake landscape below rewards a
    tile's area, where the model picks short tiles for a few rows). A later ``tune=0`` compile
    reads the records, measuring nothing, and picks the same."""
    from taskloom.compiler import drivers
    from taskloom.schedule.templates.matmul_cpu import MatmulConfig
    from taskloom.tune import Measurement, Records, tuner
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path))
    timed = []

    def fake(functions, args, target, *, on_result=None, args_each=None, **kw):
        out = []
        for i, fn in enumerate(functions):
            specs = args_each[i] if args_each is not None else args
            assert [s for s, _ in specs] == [p.type.static_shape() for p in fn.tensor_params]
            assert len(fn.params) == len(specs)  # no size parameter left
            config = fn.attr("config")
            mr, nv = map(int, config.split(",")[0].removeprefix("tile ").rstrip("v").split("x"))
            timed.append((specs[0][0][0] // 256, config))
            # tall and wide tiles win, even at one row (where the model picks a short one), each
            # by 2x or more; between equal tiles, the text decides
            out.append(Measurement(1e-3 * 2.0 ** -(mr * nv) * (1 + sum(map(ord, config)) * 1e-6)))
            if on_result is not None:
                on_result(i, out[-1])
        return out
    monkeypatch.setattr(tuner, "measure", fake)
    rows = symbol("rows")
    x = Tensor((rows, 256), T.float32, name="x")
    w = (RNG.standard_normal((512, 256)) * 0.05).astype(np.float32)
    graph = Graph([x], [ops.relu(ops.linear(x, taskloom.asarray(w)))])
    compiled = taskloom.compile(graph, tune=1, dynamic={"rows": (1, 64)})
    assert {n for n, _ in timed} == {1, 8, 64}
    assert any("exact last rows" in c for n, c in timed if n == 8)
    optimized = optimize(graph)
    (group,) = fuse_graph(optimized)
    weights = {id(c) for c in optimized.constants}
    found = find_candidate(group.task, host_target(), {k: t.numpy() for k, t in enumerate(group.inputs)
                                                         if id(t) in weights})
    points = dynamic.sample_points({"rows": (1, 64)})
    (table,) = compiled.meta["dynamic"]["variants"] or [[0] * len(points)]
    schedules = compiled.meta["kernels"][0]["schedule"].split("; ")
    for k, p in enumerate(points):  # each point runs a tile of the area measured fastest there
        key = drivers.point_workload(found.tunable.workload, (1, p["rows"], 512, 256))
        best = MatmulConfig.from_dict(Records.default().best(key, host_target().key()))
        served = schedules[table[k]].split("tile ")[1].split("v,")[0].split("x")
        assert int(served[0]) * int(served[1]) == best.mr * best.nv
    for n in (1, 5, 8, 13, 64):
        v = RNG.standard_normal((n, 256)).astype(np.float32)
        np.testing.assert_allclose(compiled(v), np.maximum(v @ w.T, 0), rtol=1e-4, atol=1e-4)
    timed.clear()
    again = taskloom.compile(graph, dynamic={"rows": (1, 64)})
    assert timed == [] and again.meta["kernels"][0]["schedule"] == compiled.meta["kernels"][0]["schedule"]
