"""The matmul template's phases: each builder yields what its comment in the generated C
names and touches only its own tensors, the loop nest runs the phases in order, and B's
prefetch is issued once in each place it belongs. Only C is generated here (no compiler
runs); tests/schedule/test_matmul_template.py runs the kernels against numpy."""
from __future__ import annotations

import pytest

from taskloom import transforms
from taskloom.backend.codegen_x86 import codegen_x86
from taskloom.ir import cdiv, f32, i32
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.functor import Visitor, collect
from taskloom.schedule.templates import matmul_cpu
from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program
from taskloom.target import CpuTarget, get_target

AVX2 = get_target("cpu -isa=avx2")
AVX512 = CpuTarget("avx512 box", 2, {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"},
                   l1d_bytes=48 * 1024, l2_bytes=2 * 1024 ** 2)
TARGETS = pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])


def config_for(target, mr=6, kc=144, mc=906, nc=1024, pm=2, pn=1) -> MatmulConfig:
    """A config with the widest tile of ``mr`` rows the target's registers hold."""
    nv = 4 if target.num_vector_registers >= 32 else 2
    return MatmulConfig(mr, nv, kc, mc, nc, pm, pn)


def c_source(program: S.Function, target) -> str:
    return codegen_x86(S.Module((transforms.lower(program),)), target)


def comments(source: str, text: str) -> list[int]:
    """The lines of ``source`` that are the comment starting with ``text``."""
    return [i for i, line in enumerate(source.splitlines()) if line.strip().startswith("// " + text)]


def tile_kinds(shape, config, target) -> int:
    """How many micro-kernels the template writes: one per kind of tile (full, or C's last
    partial row or column of tiles)."""
    _, M, N, _ = shape
    L = target.vector_lanes(f32)
    partial_columns = 0 < cdiv(N % (config.nv * L), L) < config.nv
    return (2 if M % config.mr else 1) * (2 if partial_columns else 1)


def tensors(stmt, kinds) -> set[str]:
    return {n.tensor.name for n in collect(stmt, kinds)}


def test_a_phase_is_kernel_script_on_the_builders_variables():
    x, n = E.Var("x", f32[8]), E.Var("n", i32)

    @matmul_cpu._phase
    def fill():
        "fill x"
        for i in range(n):
            x[i] = 1.0

    head, loop = fill.stmts
    assert isinstance(head, S.Comment) and head.text == "fill x"
    assert loop.extent is n and loop.body.tensor is x  # the builder's own IR variables, spliced as they are


@TARGETS
def test_phases_run_in_the_loop_nests_order(target):
    """Both operands packed, K in four blocks, edge tiles in M: B's block is packed, then A's,
    then each kind of tile runs its micro-kernel, the edge tiles saying so."""
    shape, config = (1, 512, 512, 512), config_for(target)
    program = matmul_program(shape, config, target)
    assert program.attr("packs_a") and program.attr("packs_b")
    src = c_source(program, target)
    kinds = tile_kinds(shape, config, target)
    pack_b, pack_a = comments(src, "pack B's"), comments(src, "pack A's")
    micro, broadcast = comments(src, "the micro-kernel"), comments(src, "one broadcast of A")
    assert len(pack_b) == len(pack_a) == 1 and len(micro) == len(broadcast) == kinds > 1
    assert len(comments(src, "a tile at C's last rows")) == kinds - 1
    assert pack_b[0] < pack_a[0] < micro[0]
    assert all(m < b for m, b in zip(micro, broadcast))
    assert not comments(src, "the B chunk read after this one")


@TARGETS
def test_operands_read_in_place_have_no_packing_phase(target):
    config = config_for(target)
    for shape, kw, packed in (((1, 3136, 64, 256), {}, ("pack B's",)),  # A read in place
                              ((1, 512, 512, 512), {"prepacked_b": 1}, ("pack A's",)),  # a weight's panels
                              ((1, 1, 768, 768), {}, ("pack A's",)),  # one row of tiles: B in place
                              ((1, 3136, 64, 256), {"prepacked_b": 1}, ())):
        program = matmul_program(shape, config, target, **kw)
        src = c_source(program, target)
        for phase in ("pack A's", "pack B's"):
            assert len(comments(src, phase)) == (phase in packed), (shape, kw, phase)
        assert program.attr("packs_a") == ("pack A's" in packed)
        assert program.attr("packs_b") == ("pack B's" in packed)


class _Loops(Visitor):
    """The loop variables around each prefetch."""

    def __init__(self):
        self.around: list[str] = []
        self.prefetches: list[tuple[str, ...]] = []

    def visit_For(self, s):
        self.around.append(s.var.name)
        self.generic_visit(s)
        self.around.pop()

    def visit_Prefetch(self, s):
        self.prefetches.append(tuple(self.around))


@TARGETS
@pytest.mark.parametrize("K, short", [(300, True), (256, False), (100, False)])
def test_prefetch_is_issued_once_in_each_place(target, K, short):
    """With a streamed weight, each kind of tile asks for B's next chunk in its k loop, and
    again after a short last K block for the lines that block had no steps for."""
    shape, config = (1, 96, 200, K), config_for(target, kc=128, mc=48, nc=64)
    program = matmul_program(shape, config, target, prepacked_b=1, prefetch_b=True)
    assert program.attr("prefetch_b")
    kinds = tile_kinds(shape, config, target)
    loops = _Loops()
    loops.visit(program.body)
    in_k = [p for p in loops.prefetches if p[-2:] == ("k", "j")]  # j: the lines asked for at a step
    in_tail = [p for p in loops.prefetches if p[-2:] == ("t", "j")]
    assert len(in_k) == kinds and len(in_tail) == (kinds if short else 0)
    assert len(loops.prefetches) == len(in_k) + len(in_tail)
    src = c_source(program, target)
    assert src.count("__builtin_prefetch(") == len(loops.prefetches)
    assert len(comments(src, "K's short last block")) == len(in_tail)
    assert len(comments(src, "the B chunk read after this one")) == 1
    plain = c_source(matmul_program(shape, config, target, prepacked_b=1), target)
    assert "__builtin_prefetch(" not in plain and not comments(plain, "the B chunk read after this one")


def phase_inputs(plan):
    """Fresh IR variables for the kernel's tensors and a block's loop values."""
    idx = {n: E.Var(n, i32) for n in ("b", "m_lo", "m0", "mm", "m_hi", "n0", "nn", "n_hi", "kb", "k0", "kn")}
    A = E.Var("A", f32[plan.Bt, plan.M, plan.K])
    B = E.Var("B", f32[plan.B_SHAPE])
    C = E.Var("C", f32[plan.Bt, plan.M, plan.N])
    Ap = E.Var("Ap", f32[plan.MC, plan.KCP])
    Bp = E.Var("Bp", f32[plan.NC // plan.NR, plan.KC, plan.NR])
    Cb = E.Var("Cb", f32[plan.CB_SHAPE])
    return matmul_cpu._Block(A, B, C, Ap, Bp, Cb, **idx)


def test_each_phase_touches_only_what_its_comment_names():
    """Packing B reads B and writes its panels, packing A reads A and writes its block, the
    micro-kernel writes registers only, the store writes C or the partial sums, and the
    prefetch asks for B and writes nothing."""
    shape, config = (1, 50, 80, 77), MatmulConfig(6, 4, 32, 24, 32, 1, 1)
    packing = matmul_cpu._plan(shape, config, AVX512, 0, True, False, 0)
    assert packing.PACK_A and packing.PACK_B and packing.KB > 1
    at = phase_inputs(packing)
    stores, loads = (S.VectorStore, S.BufferStore), E.VectorLoad

    pack_b = matmul_cpu._pack_b(packing, at.B, at.Bp, at.b, at.n0, at.nn, at.n_hi, at.k0, at.kn)
    assert pack_b.stmts[0].text.startswith("pack B's")
    assert tensors(pack_b, stores) == {"Bp"} and tensors(pack_b, loads) == {"B"}

    pack_a = matmul_cpu._pack_a(packing, at.A, at.Ap, at.b, at.m0, at.mm, at.k0, at.kn)
    assert pack_a.stmts[0].text.startswith("pack A's")
    assert tensors(pack_a, stores) == {"Ap"} and tensors(pack_a, loads) == {"A"}

    jr, ir, tile = E.Var("jr", i32), E.Var("ir", i32), E.Var("tile", i32)
    tile_stmt = matmul_cpu._tile(packing, at, jr, ir, tile, None, 6, 4, False)
    micro = [s for s in tile_stmt.stmts if isinstance(s, S.Comment)]
    assert [c.text for c in micro] == ["the micro-kernel: MR x NV vector FMAs per k"]
    acc = next(s.var for s in tile_stmt.stmts if isinstance(s, S.Declare))
    mk = matmul_cpu._micro_kernel(packing, at, jr, ir, None, acc, 6, 4)
    assert tensors(mk, stores) == {"acc", "bv"} and tensors(mk, (S.Prefetch,)) == set()
    assert {n.tensor.name for n in collect(mk, (E.VectorLoad, E.TensorElement))} == {"Ap", "Bp", "acc", "bv"}
    store = matmul_cpu._store_tile(packing, at, jr, ir, tile, acc, 6, 4)
    assert tensors(store, stores) == {"C", "Cb", "acc"} and tensors(store, loads) == {"Cb"}
    assert all(s.count is not None for s in collect(store, S.VectorStore) if s.tensor.name == "C")  # masked

    streaming = matmul_cpu._plan(shape, config, AVX512, 1, True, True, 0)
    assert streaming.PF and not streaming.PACK_B
    at = phase_inputs(streaming)
    pf = (E.Var("pf_panel", i32), E.Var("pf_row", i32), E.Var("pf_lines", i32))
    prefetch = matmul_cpu._prefetch_b(streaming, at, ir, at.kn, pf)
    assert tensors(prefetch, (S.Prefetch,)) == {"B"} and not collect(prefetch, stores)
    tile_stmt = matmul_cpu._tile(streaming, at, jr, ir, tile, pf, 2, 1, True)
    assert len(collect(tile_stmt, S.Prefetch)) == 2  # in the k loop, and after the short last block
    assert [c.text for c in collect(tile_stmt, S.Comment)][0].startswith("a tile at C's last rows")
