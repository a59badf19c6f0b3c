"""Statement passes pinned as before/after kernel script: each case is the program a pass
receives and the program it must give, both as text (``astext`` / ``parse_source``), so a
change to a pass (a GPU lowering, a new index type) shows up here as a readable diff."""
from __future__ import annotations

import textwrap

from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.ir import astext
from taskloom.schedule.contraction import match_contraction
from taskloom.schedule.post_fusion import fuse_contraction
from taskloom.script import parse_source
from taskloom.transforms import lower_mappings
from taskloom.transforms.simplify import simplify


def script(text: str) -> str:
    return textwrap.dedent(text).strip()


def check(before: str, after: str, apply) -> None:
    fn = parse_source(script(before))
    assert astext(fn).strip() == script(before)  # the before text is the printer's own
    assert astext(apply(fn)).strip() == script(after)


def test_lower_mappings_gives_the_papers_figure_8():
    """256 threads over a 128 x 128 tile: 8 warps as 4 x 2, each repeating 2 x 2 times over
    4 x 8 lanes that each own 4 x 4 elements."""
    check('''
        @kernel
        def fig8(out: f32[128, 128]):
            for w in parallel(256):
                for i, j in (spatial(4, 2) * repeat(2, 2) * spatial(4, 8) * repeat(4, 4)).on(w):
                    out[i, j] = 1.0
        ''', '''
        @kernel
        def fig8(out: f32[128, 128]):
            for w in parallel(256):
                for i_1 in unroll(2):
                    for j_1 in unroll(2):
                        for i_3 in unroll(4):
                            for j_3 in unroll(4):
                                i = w // 64 * 32 + i_1 * 16 + w % 32 // 8 * 4 + i_3
                                j = w // 32 % 2 * 64 + j_1 * 32 + w % 8 * 4 + j_3
                                out[i, j] = 1.0
        ''', lambda fn: simplify(lower_mappings(fn)))


def test_lower_mappings_walks_ranks_column_major():
    """``ranks=[1, 0]`` makes the column the outer loop; each worker owns two rows."""
    check('''
        @kernel
        def cols(out: f32[4, 3]):
            for w in parallel(2):
                for i, j in (spatial(2, 1) * repeat(2, 3, ranks=[1, 0])).on(w):
                    out[i, j] = 0.0
        ''', '''
        @kernel
        def cols(out: f32[4, 3]):
            for w in parallel(2):
                for j in unroll(3):
                    for i_1 in unroll(2):
                        i = w * 2 + i_1
                        out[i, j] = 0.0
        ''', lambda fn: simplify(lower_mappings(fn)))


def test_post_fusion_rewrites_operand_reads_and_result_stores():
    """A transposed, scaled A and a bias-add + relu epilogue fused into a naive template."""
    x, w, bias = input((6, 4), name="x"), input((6, 8), name="w"), input((8,), name="bias")
    y = ops.relu(ops.matmul(ops.transpose(x, 0, 1) * 2.0, w) + bias)
    [group] = fuse_graph(Graph([x, w, bias], [y]))
    con = match_contraction(group.task)
    check('''
        @kernel
        def naive(A: f32[1, 4, 6], B: f32[1, 6, 8], C: f32[1, 4, 8]):
            for m in range(4):
                for n in range(8):
                    acc: f32 = 0.0
                    for k in range(6):
                        acc = acc + A[0, m, k] * B[0, k, n]
                    C[0, m, n] = acc
        ''', '''
        @kernel(out_row=8)
        def naive(x: f32[24], b: f32[1], b_: f32[48], b__: f32[8], out: f32[32]):
            for m in range(4):
                for n in range(8):
                    acc: f32 = 0.0
                    for k in range(6):
                        acc = acc + x[k * 4 + m] * b[0] * b_[k * 8 + n]
                    out[m * 8 + n] = max(acc + b__[n], 0.0)
        ''', lambda fn: fuse_contraction(fn, con))
