"""Task mappings: the semantics of the Hidet paper, checked by hand-computed lists and by properties."""
from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskloom.errors import MappingError
from taskloom.ir import Composed, Repeat, Spatial, custom, repeat, spatial, var
from taskloom.ir.mapping import covers_exactly_once


def all_tasks(m):
    return {w: m.worker_tasks(w) for w in range(m.num_workers)}


# ----------------------------------------------------------------------------- the paper's atoms

def test_repeat_2x2_is_one_worker_walking_row_major():
    m = repeat(2, 2)
    assert m.num_workers == 1
    assert m.task_shape == (2, 2)
    assert m.worker_tasks(0) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_spatial_2x2_gives_each_of_four_workers_one_task():
    m = spatial(2, 2)
    assert m.num_workers == 4
    assert m.task_shape == (2, 2)
    assert all_tasks(m) == {0: [(0, 0)], 1: [(0, 1)], 2: [(1, 0)], 3: [(1, 1)]}


def test_column_major_ranks_walk_the_grid_down_the_columns():
    # Hidet Figure 12(d): ranks=[1, 0] makes the first axis vary fastest
    assert repeat(2, 2, ranks=[1, 0]).worker_tasks(0) == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert all_tasks(spatial(2, 2, ranks=[1, 0])) == {0: [(0, 0)], 1: [(1, 0)], 2: [(0, 1)], 3: [(1, 1)]}


def test_column_major_on_a_non_square_grid():
    assert repeat(2, 3, ranks=[1, 0]).worker_tasks(0) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert [spatial(2, 3, ranks=[1, 0]).worker_tasks(w)[0] for w in range(6)] == \
        [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    # the default order on the same grid is row-major
    assert repeat(2, 3).worker_tasks(0) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


def test_three_dimensional_ranks_name_the_slowest_axis_rank_zero():
    # axis 1 has rank 0 (slowest), then axis 2, then axis 0 (fastest)
    assert repeat(2, 2, 2, ranks=[2, 0, 1]).worker_tasks(0) == [
        (0, 0, 0), (1, 0, 0), (0, 0, 1), (1, 0, 1), (0, 1, 0), (1, 1, 0), (0, 1, 1), (1, 1, 1)]
    assert [spatial(2, 2, 2, ranks=[2, 0, 1]).worker_tasks(w)[0] for w in range(3)] == \
        [(0, 0, 0), (1, 0, 0), (0, 0, 1)]


# ----------------------------------------------------------------------------- compositions by hand
# f3(w) = [t1 * d2 + t2 for t1 in f1(w // n2) for t2 in f2(w % n2)]

def test_spatial_times_repeat_gives_each_worker_a_contiguous_block():
    m = spatial(2, 2) * repeat(2, 2)
    assert (m.num_workers, m.task_shape) == (4, (4, 4))
    assert all_tasks(m) == {
        0: [(0, 0), (0, 1), (1, 0), (1, 1)],
        1: [(0, 2), (0, 3), (1, 2), (1, 3)],
        2: [(2, 0), (2, 1), (3, 0), (3, 1)],
        3: [(2, 2), (2, 3), (3, 2), (3, 3)],
    }


def test_repeat_times_spatial_gives_each_worker_a_strided_set():
    m = repeat(2, 2) * spatial(2, 2)
    assert (m.num_workers, m.task_shape) == (4, (4, 4))
    assert all_tasks(m) == {
        0: [(0, 0), (0, 2), (2, 0), (2, 2)],
        1: [(0, 1), (0, 3), (2, 1), (2, 3)],
        2: [(1, 0), (1, 2), (3, 0), (3, 2)],
        3: [(1, 1), (1, 3), (3, 1), (3, 3)],
    }


def test_composition_with_column_major_atoms():
    m = spatial(2, 2, ranks=[1, 0]) * repeat(1, 2)
    assert (m.num_workers, m.task_shape) == (4, (2, 4))
    assert all_tasks(m) == {0: [(0, 0), (0, 1)], 1: [(1, 0), (1, 1)], 2: [(0, 2), (0, 3)], 3: [(1, 2), (1, 3)]}
    m = repeat(2, 2, ranks=[1, 0]) * spatial(1, 2)
    assert all_tasks(m) == {0: [(0, 0), (1, 0), (0, 2), (1, 2)], 1: [(0, 1), (1, 1), (0, 3), (1, 3)]}


def test_one_dimensional_compositions():
    assert all_tasks(spatial(2) * repeat(3)) == {0: [(0,), (1,), (2,)], 1: [(3,), (4,), (5,)]}
    assert all_tasks(repeat(3) * spatial(2)) == {0: [(0,), (2,), (4,)], 1: [(1,), (3,), (5,)]}
    assert all_tasks(spatial(2) * repeat(2) * spatial(2)) == {
        0: [(0,), (2,)], 1: [(1,), (3,)], 2: [(4,), (6,)], 3: [(5,), (7,)]}


def test_composition_is_not_commutative():
    a, b = spatial(2, 2), repeat(2, 2)
    assert a * b != b * a
    assert all_tasks(a * b) != all_tasks(b * a)


def test_warps_repeats_threads_elements_tile_of_256_workers():
    m = spatial(4, 2) * repeat(2, 2) * spatial(4, 8) * repeat(4, 4)
    assert m.num_workers == 256
    assert m.task_shape == (128, 128)
    tasks = all_tasks(m)
    assert all(len(ts) == 64 for ts in tasks.values())
    assert covers_exactly_once(m)
    everything = [t for ts in tasks.values() for t in ts]
    assert len(everything) == 128 * 128 and len(set(everything)) == 128 * 128
    # worker 0: four 4x4 blocks at row offsets 0/16 and column offsets 0/32
    w0 = tasks[0]
    assert w0[:16] == [(r, c) for r in range(4) for c in range(4)]
    assert w0[16] == (0, 32) and w0[32] == (16, 0) and w0[48] == (16, 32) and w0[-1] == (19, 35)
    # the next thread of a warp starts 4 columns over, the next warp 64 columns over
    assert tasks[1][0] == (0, 4)
    assert tasks[8][0] == (4, 0)
    assert tasks[32][0] == (0, 64)
    assert tasks[64][0] == (32, 0)
    assert tasks[255][0] == (96 + 12, 64 + 28)


# ----------------------------------------------------------------------------- reference semantics

def ref_atom(kind, shape, ranks):
    """Worker -> tasks of one atom, computed straight from the definition."""
    order = sorted(range(len(shape)), key=lambda a: ranks[a])  # slowest axis first

    def nth(k):
        task = [0] * len(shape)
        for axis in reversed(order):
            task[axis] = k % shape[axis]
            k //= shape[axis]
        return tuple(task)

    n = math.prod(shape)
    if kind == "spatial":
        return n, tuple(shape), lambda w: [nth(w)]
    return 1, tuple(shape), lambda w: [nth(k) for k in range(n)]


def ref_compose(f1, f2):
    n1, d1, g1 = f1
    n2, d2, g2 = f2

    def g(w):
        return [tuple(a * d + b for a, d, b in zip(t1, d2, t2)) for t1 in g1(w // n2) for t2 in g2(w % n2)]
    return n1 * n2, tuple(a * b for a, b in zip(d1, d2)), g


@st.composite
def atom_specs(draw, ndim):
    kind = draw(st.sampled_from(["spatial", "repeat"]))
    shape = draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim))
    ranks = draw(st.permutations(list(range(ndim))))
    return kind, tuple(shape), tuple(ranks)


@st.composite
def chains(draw, min_atoms=1, max_atoms=4, max_tasks=1024):
    ndim = draw(st.integers(1, 3))
    specs = draw(st.lists(atom_specs(ndim), min_size=min_atoms, max_size=max_atoms))
    total = math.prod(math.prod(s) for _, s, _ in specs)
    if total > max_tasks:  # keep the grid small: drop atoms from the end until it fits
        while len(specs) > min_atoms and math.prod(math.prod(s) for _, s, _ in specs) > max_tasks:
            specs.pop()
    return specs


def build(spec):
    kind, shape, ranks = spec
    return (spatial if kind == "spatial" else repeat)(*shape, ranks=list(ranks))


def compose_all(specs):
    m = build(specs[0])
    for s in specs[1:]:
        m = m * build(s)
    return m


@settings(max_examples=80, deadline=None)
@given(chains())
def test_any_composition_matches_the_reference_definition(specs):
    m = compose_all(specs)
    ref = ref_atom(*specs[0])
    for s in specs[1:]:
        ref = ref_compose(ref, ref_atom(*s))
    n, d, g = ref
    assert m.num_workers == n
    assert m.task_shape == d
    for w in range(n):
        assert m.worker_tasks(w) == g(w)


@settings(max_examples=80, deadline=None)
@given(chains())
def test_any_composition_covers_each_task_exactly_once(specs):
    m = compose_all(specs)
    assert covers_exactly_once(m)
    tasks = [t for w in range(m.num_workers) for t in m.worker_tasks(w)]
    assert sorted(tasks) == list(itertools.product(*map(range, m.task_shape)))


@settings(max_examples=60, deadline=None)
@given(chains(min_atoms=3, max_atoms=3, max_tasks=10 ** 9))
def test_composition_is_associative(specs):
    a, b, c = (build(s) for s in specs)
    left, right = (a * b) * c, a * (b * c)
    assert left == right and hash(left) == hash(right)
    assert left.num_workers == right.num_workers
    assert left.task_shape == right.task_shape
    n = left.num_workers
    if math.prod(left.task_shape) <= 4096:
        for w in range(n):
            assert left.worker_tasks(w) == right.worker_tasks(w)
    else:
        for w in {0, n // 3, n - 1}:
            assert left.worker_tasks(w) == right.worker_tasks(w)


@settings(max_examples=60, deadline=None)
@given(chains(max_tasks=10 ** 9))
def test_num_workers_and_task_shape_follow_the_rules(specs):
    m = compose_all(specs)
    n = math.prod(math.prod(s) if k == "spatial" else 1 for k, s, _ in specs)
    d = tuple(math.prod(s[i] for _, s, _ in specs) for i in range(len(specs[0][1])))
    assert m.num_workers == n
    assert m.task_shape == d
    tasks_per_worker = math.prod(math.prod(s) for k, s, _ in specs if k == "repeat")
    assert len(m.worker_tasks(0)) == tasks_per_worker
    assert len(m.worker_tasks(n - 1)) == tasks_per_worker


def test_composition_is_stored_flat():
    a, b, c = spatial(2), repeat(3), spatial(4)
    m = (a * b) * c
    assert isinstance(m, Composed)
    assert m.parts == (a, b, c)
    assert ((a * b) * (c * a)).parts == (a, b, c, a)


# ----------------------------------------------------------------------------- custom mappings

def rows(w):
    return [(w, j) for j in range(4)]


def test_custom_mapping_uses_its_function():
    m = custom([4, 4], 4, rows)
    assert m.num_workers == 4 and m.task_shape == (4, 4)
    assert m.worker_tasks(2) == [(2, 0), (2, 1), (2, 2), (2, 3)]
    assert covers_exactly_once(m)


def test_custom_mapping_composes_like_any_other():
    m = spatial(2, 1) * custom([4, 4], 4, rows)
    assert m.num_workers == 8 and m.task_shape == (8, 4)
    assert m.worker_tasks(5) == [(5, 0), (5, 1), (5, 2), (5, 3)]
    assert covers_exactly_once(m)
    m = custom([2, 2], 2, lambda w: [(w, 0), (w, 1)]) * repeat(1, 2)
    assert m.worker_tasks(1) == [(1, 0), (1, 1), (1, 2), (1, 3)]


def test_custom_mapping_that_misses_or_repeats_tasks_is_not_a_cover():
    assert not covers_exactly_once(custom([4], 2, lambda w: [(0,), (1,)]))
    assert not covers_exactly_once(custom([4], 2, lambda w: [(w,)]))


def test_custom_mapping_task_outside_the_grid_raises():
    m = custom([4, 4], 2, lambda w: [(w, 4)])
    with pytest.raises(MappingError, match=r"custom mapping gave worker 1 the task \(1, 4\)"):
        m.worker_tasks(1)
    with pytest.raises(MappingError, match="outside"):
        custom([4, 4], 2, lambda w: [(w,)]).worker_tasks(0)


# ----------------------------------------------------------------------------- errors

@pytest.mark.parametrize("make", [lambda: spatial(0, 2), lambda: repeat(2, -1), lambda: custom([0], 1, rows)])
def test_non_positive_dimensions_raise(make):
    with pytest.raises(MappingError, match="must be positive"):
        make()


@pytest.mark.parametrize("make", [spatial, repeat])
def test_no_dimensions_or_bad_dimension_types_raise(make):
    with pytest.raises(MappingError, match="at least one dimension"):
        make()
    with pytest.raises(MappingError, match="ints or integer expressions"):
        make(2.0)
    with pytest.raises(MappingError, match="ints or integer expressions"):
        make(True, 2)


@pytest.mark.parametrize("ranks", [[0, 0], [0, 1, 2], [1], [1, 2], ["a", "b"], [1.0, 0.0], [True, False]])
def test_bad_ranks_raise(ranks):
    with pytest.raises(MappingError, match=r"ranks must be a permutation of 0\.\.1"):
        spatial(2, 2, ranks=ranks)
    with pytest.raises(MappingError, match=r"repeat\(\) ranks"):
        repeat(2, 2, ranks=ranks)


def test_custom_needs_positive_workers():
    with pytest.raises(MappingError, match="positive number of workers, got 0"):
        custom([4], 0, rows)


def test_composing_mappings_of_different_dimensions_raises():
    with pytest.raises(MappingError, match=r"cannot compose spatial\(2\) \(1-D tasks\) with "
                                           r"repeat\(2, 2\) \(2-D tasks\); dimensions must match"):
        spatial(2) * repeat(2, 2)
    with pytest.raises(MappingError, match="dimensions must match"):
        (spatial(2, 2) * repeat(2, 2)) * repeat(2)


@pytest.mark.parametrize("w", [-1, 4, 100, 1.0, "0", None])
def test_worker_out_of_range_raises(w):
    with pytest.raises(MappingError, match=r"out of range for spatial\(2, 2\) with 4 workers"):
        spatial(2, 2).worker_tasks(w)


def test_worker_tasks_of_a_symbolic_mapping_raises():
    M = var("M")
    m = spatial(M, 4)
    assert m.task_shape == (M, 4)
    with pytest.raises(MappingError, match="static shapes"):
        m.worker_tasks(0)


def test_symbolic_mappings_have_symbolic_counts():
    M = var("M")
    m = spatial(M, 2) * repeat(2, M)
    assert m.num_workers == M * 2
    assert m.task_shape == (M * 2, 2 * M)


# ----------------------------------------------------------------------------- equality and printing

def test_mappings_have_structural_equality_and_hashing():
    assert spatial(2, 2) == spatial(2, 2) and hash(spatial(2, 2)) == hash(spatial(2, 2))
    assert spatial(2, 2) == spatial(2, 2, ranks=[0, 1])
    assert spatial(2, 2) != repeat(2, 2)
    assert spatial(2, 2) != spatial(2, 2, ranks=[1, 0])
    assert spatial(2, 2) != spatial(2, 4)
    assert spatial(2) * repeat(2) == spatial(2) * repeat(2)
    assert len({spatial(2) * repeat(2), spatial(2) * repeat(2), repeat(2) * spatial(2)}) == 2
    assert isinstance(spatial(2), Spatial) and isinstance(repeat(2), Repeat)


@pytest.mark.parametrize("m, text", [
    (spatial(2, 2), "spatial(2, 2)"),
    (repeat(4), "repeat(4)"),
    (repeat(2, 3, ranks=[1, 0]), "repeat(2, 3, ranks=[1, 0])"),
    (spatial(2, 2, ranks=[0, 1]), "spatial(2, 2)"),
    (spatial(4, 2) * repeat(2, 2) * spatial(4, 8) * repeat(4, 4),
     "spatial(4, 2) * repeat(2, 2) * spatial(4, 8) * repeat(4, 4)"),
    (spatial(var("M"), 4), "spatial(M, 4)"),
    (custom([4, 4], 4, rows), "custom([4, 4], 4, rows)"),
])
def test_printing_of_mappings(m, text):
    assert repr(m) == text
    assert str(m) == text
