"""The learned cost model: program features count what runs, the ranker trains on a shipped
record set and ranks it, features are cached."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.schedule.contraction import match_contraction
from taskloom.schedule.cpu import tunable
from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program
from taskloom.target.cpu import CpuTarget
from taskloom.transforms import lower
from taskloom.tune import cost_model
from taskloom.tune.records import Records

DATA = Path(__file__).parent / "data" / "records.jsonl.gz"  # 4 BERT shapes, the whole space measured
POOL = 24  # the configs per task the tests featurize (each lowers a program)
AVX512 = CpuTarget("test-avx512", 2, frozenset({"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw",
                                                "avx512vl", "avx512dq"}), 48 * 1024, 2 * 1024 * 1024,
                   32 * 1024 * 1024)


def _cdiv(a, b):
    return -(-a // b)


@pytest.mark.parametrize("shape,config", [
    ((1, 100, 70, 33), MatmulConfig(6, 4, 16, 24, 64, 1, 2)),
    ((2, 37, 130, 300), MatmulConfig(4, 2, 128, 12, 1024, 2, 1)),
    ((1, 512, 512, 64), MatmulConfig(8, 3, 32, 680, 1024, 2, 1)),
])
def test_program_features_count_the_fmas_that_run(shape, config):
    """Every register tile does MR x NV vector FMAs per k, except C's last, partial row and
    column of tiles, which do only their real rows and vectors."""
    f = cost_model.program_features(lower(matmul_program(shape, config, AVX512)))
    Bt, M, N, K = shape
    L, c = 16, config
    NR = c.nv * L
    band_m = _cdiv(_cdiv(M, c.pm), c.mr) * c.mr
    band_n = _cdiv(_cdiv(N, c.pn), NR) * NR
    mc, nc = min(_cdiv(c.mc, c.mr) * c.mr, band_m), min(_cdiv(c.nc, NR) * NR, band_n)

    def starts(total, band, block, tile):  # where each tile of each band's blocks starts
        return [b0 + i0 + t for b0 in range(0, total, band) for i0 in range(0, min(band, total - b0), block)
                for t in range(0, min(block, band - i0, total - b0 - i0), tile)]

    rows = [c.mr if r + c.mr <= M else M % c.mr for r in starts(M, band_m, mc, c.mr)]
    vecs = [c.nv if j + NR <= N else min(c.nv, _cdiv(N % NR, L)) for j in starts(N, band_n, nc, NR)]
    assert f["fma"] == Bt * K * sum(rows) * sum(vecs)
    assert f["parallel"] == c.pm * c.pn and f["gather"] == 0
    assert f["flops"] == 2 * L * f["fma"]


def test_program_features_count_a_call_made_for_its_effect():
    """An expression evaluated for its effect (``Evaluate``) is counted like any other."""
    from taskloom.ir import Var, call, const, f32, var
    from taskloom.ir import stmt as S
    A, i = Var("A", f32[8]), var("i")
    fn = S.Function("k", (A,), S.For(i, const(8), S.Evaluate(call("exp", A[i]))))
    f = cost_model.program_features(fn)
    assert f["load_param"] == 8


def test_features_of_a_prepacked_workload_describe_the_kernel_reading_panels():
    """B packing nothing (a /prepacked key) means the kernel reads B's panels: no packing
    stores of B among its program features."""
    shape, config = (1, 64, 96, 80), MatmulConfig(4, 2, 16, 8, 32, 1, 2)
    names = list(cost_model.FEATURE_NAMES)
    packs, panels = (cost_model.features(shape, p, config, AVX512) for p in ((2.0, 2.0), (2.0, 0.0)))
    stores = names.index("program.vstore_local")
    assert panels[stores] < packs[stores]
    key = "matmul_cpu/1x64x96x80/packcopy+copy/0123456789abcdef/prepacked"
    assert cost_model.parse_workload(key, AVX512) == (shape, (2.0, 0.0))


def test_program_features_see_a_convolutions_window():
    x = input((1, 4, 10, 10), name="x")
    w = np.ones((8, 4, 3, 3), np.float32)
    import taskloom
    (g,) = fuse_graph(Graph([x], [ops.conv2d(x, taskloom.asarray(w), stride=2, padding=1)]))
    t = tunable(match_contraction(g.task), AVX512)
    fn = lower(t.kernel(MatmulConfig(4, 2, 16, 8, 32, 1, 2)))
    f = cost_model.program_features(fn)
    assert f["load_param"] > 0 and f["branch"] > 0


def test_workload_keys_carry_what_the_features_need():
    a, b = input((64, 32), name="a"), input((32, 48), name="b")
    (g,) = fuse_graph(Graph([a, b], [ops.matmul(a, b)]))
    t = tunable(match_contraction(g.task), AVX512)
    assert "/packcopy+copy/" in t.workload
    assert cost_model.parse_workload(t.workload, AVX512) == ((1, 64, 48, 32), t.pack)
    assert cost_model.parse_workload("matmul_cpu/1x512x512x512", AVX512) == ((1, 512, 512, 512), (2.0, 2.0))
    assert cost_model.parse_workload("matmul_cpu/1x8x8x8/packlane32+gather/d", AVX512) == ((1, 8, 8, 8), (32.0, 10.0))
    assert cost_model.parse_workload("conv_cuda/1x2", AVX512) is None
    assert cost_model.parse_workload("matmul_cpu/1xAx3x4", AVX512) is None
    assert cost_model.parse_workload("matmul_cpu/1x2x3x4/packodd+copy/d", AVX512) is None


def test_relevance_grades():
    g = cost_model.relevance(np.array([1.0, 1.05, 1.5, 2.0, 3.0]))
    assert list(g) == [16, 15, 8, 0, 0]


def _shipped(tmp_path) -> Records:
    records = Records(tmp_path / "r.sqlite")
    records.import_file(DATA)
    return records


def _target(records: Records) -> CpuTarget:
    """The shipped records' target, as a CpuTarget with the key they were recorded under."""
    (key,) = {r.target for r in records.records()}
    flags = frozenset(f for f in key.split("-")[1:])
    return CpuTarget("recorded", 2, flags, 48 * 1024, 2 * 1024 * 1024, 480 * 1024 * 1024)


def test_the_ranker_learns_the_shipped_records(tmp_path):
    pytest.importorskip("lightgbm")
    records = _shipped(tmp_path)
    target = _target(records)
    data = cost_model.training_set(records, target, pool=POOL)
    assert len(data.groups) >= 3 and sum(data.groups) == len(data.X)
    model = cost_model.CostModel().fit(data)
    scores = model.scores(data.X)
    start = 0
    for n in data.groups:  # within each task, higher scores go with faster configs
        s, t = scores[start:start + n], data.seconds[start:start + n]
        rho = np.corrcoef(np.argsort(np.argsort(-s)), np.argsort(np.argsort(t)))[0, 1]
        assert rho > 0.3
        start += n
    again = cost_model.CostModel().fit(data).scores(data.X)
    np.testing.assert_array_equal(scores, again)  # deterministic


def test_features_are_cached_in_the_database(tmp_path, monkeypatch):
    records = Records(tmp_path / "r.sqlite")
    items = [((1, 64, 64, 64), (2.0, 2.0), MatmulConfig(6, 4, 64, 64, 1024, 1, 2))]
    first = cost_model.FeatureCache(records).get_many(items, AVX512)
    cost_model.FeatureCache._memory.clear()
    monkeypatch.setattr(cost_model, "features", lambda *a: (_ for _ in ()).throw(AssertionError("recomputed")))
    np.testing.assert_allclose(cost_model.FeatureCache(records).get_many(items, AVX512), first, atol=1e-5)
