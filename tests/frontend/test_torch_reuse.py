"""A graph dynamo traces again for a guard on a size is served by the library compiled for an
earlier graph when it is that graph at that size (taskloom.frontend.torch_reuse)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import taskloom.torch as tt  # noqa: E402
from taskloom.frontend.torch_reuse import specializes  # noqa: E402

EVERY_SIZE = (0, 2 ** 31 - 1)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()  # (what dynamo learnt of a forward's sizes in one test changes its graphs in the next)
    yield
    torch._dynamo.reset()


def _expands(x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """transformers' GPT-2 does this to its position ids: at a batch of 1, no expand."""
    q = p[:, : x.shape[1]]
    if x.shape[0] != q.shape[0]:
        q = q.expand(x.shape[0], -1)
    return (x + q).relu().reshape(-1)


def _graphs(f, *shapes, p=None):
    p = torch.randn(1, 16) if p is None else p
    return [make_fx(f, tracing_mode="symbolic")(torch.randn(*s), p) for s in shapes]


def _match(earlier, later, ranges=lambda symbol: EVERY_SIZE):
    return specializes(earlier, ["x", "p"], ranges, later, ["x", "p"], [True, False])


def test_a_batch_of_1_without_its_expand_is_the_earlier_graph():
    earlier, later = _graphs(_expands, (3, 5), (1, 5))
    assert "expand" in earlier.code and "expand" not in later.code
    binding = _match(earlier, later)
    assert binding is not None
    assert sorted(v for v in binding.values.values() if isinstance(v, int)) == [1]  # the batch
    assert binding.sources == (("arg", 0), ("arg", 1))
    x, p = torch.randn(1, 5), torch.randn(1, 16)
    torch.testing.assert_close(earlier(*binding.arguments([x, p])), later(x, p))


def test_other_code_at_a_batch_of_1_is_no_match():
    def branches(x, p):
        y = _expands(x, p)
        return y * 2 if x.shape[0] == 1 else y
    earlier, later = _graphs(branches, (3, 5), (1, 5))
    assert _match(earlier, later) is None


def test_a_size_outside_the_earlier_librarys_range_is_no_match():
    earlier, later = _graphs(_expands, (3, 5), (1, 5))
    assert _match(earlier, later, lambda symbol: (2, EVERY_SIZE[1])) is None


def test_inputs_on_another_device_or_of_another_dtype_make_no_match():
    (earlier,) = _graphs(_expands, (3, 5))
    p = torch.randn(1, 16)
    on_meta = make_fx(_expands, tracing_mode="symbolic")(torch.randn(1, 5, device="meta"), p.to("meta"))
    in_double = make_fx(_expands, tracing_mode="symbolic")(torch.randn(1, 5, dtype=torch.float64), p.double())
    assert _match(earlier, on_meta) is None and _match(earlier, in_double) is None


def test_random_operators_and_restrides_make_no_match():
    def noisy(x, p):
        return _expands(x, p) + torch.rand_like(x).reshape(-1)

    def restrided(x, p):  # (reads memory as laid out: equal values need not be equal memory)
        return _expands(x, p) + x.as_strided((x.shape[0] * x.shape[1],), (1,))
    for f in (noisy, restrided):
        earlier, later = _graphs(f, (3, 5), (1, 5))
        assert _match(earlier, later) is None, f.__name__


def test_constants_compare_by_value():
    def scaled(scale):
        return lambda x, p: _expands(x, p) * torch.tensor(scale).repeat(x.shape[1])[0]
    (earlier,) = _graphs(scaled([2.0, 3.0]), (3, 5))
    same, other = _graphs(scaled([2.0, 3.0]), (1, 5))[0], _graphs(scaled([2.0, 4.0]), (1, 5))[0]
    assert _match(earlier, same) is not None
    assert _match(earlier, other) is None


class Positions(torch.nn.Module):
    """A position table added to the input, expanded to the batch as transformers' GPT-2 does."""

    def __init__(self, d: int = 16, positions: int = 32):
        super().__init__()
        self.position = torch.nn.Parameter(torch.randn(1, positions, d))
        self.proj = torch.nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.position[:, : x.shape[1]]
        if x.shape[0] != p.shape[0]:
            p = p.expand(x.shape[0], -1, -1)
        return self.proj(x + p).softmax(-1)


def _libraries(compiled) -> list:
    return [fn for fn in compiled.taskloom_backend.compiled if fn.reuses is None]


def test_dynamos_graph_for_a_batch_of_1_runs_the_first_library():
    torch.manual_seed(0)
    model = Positions().eval()
    compiled = tt.compile(model, dynamic=True, fallback=False)
    with torch.no_grad():
        for b, t in [(3, 5), (1, 5), (1, 9), (4, 2), (1, 1)]:
            x = torch.randn(b, t, 16)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
    first, *later = compiled.taskloom_backend.compiled
    assert later and all(fn.reuses is first for fn in later)  # dynamo's graphs at a batch of 1
    assert _libraries(compiled) == [first] and compiled.taskloom_backend.libraries == 1
    assert all(fn.compiled_graph is first.compiled_graph for fn in later)


def test_another_models_parameters_compile_their_own_library():
    torch.manual_seed(0)
    one, two = Positions().eval(), Positions().eval()
    a, b = tt.compile(one, dynamic=True, fallback=False), tt.compile(two, dynamic=True, fallback=False)
    with torch.no_grad():
        for b_, t in [(3, 5), (1, 5)]:
            x = torch.randn(b_, t, 16)
            torch.testing.assert_close(a(x), one(x), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(b(x), two(x), rtol=1e-5, atol=1e-6)
    assert len(_libraries(a)) == 1 and len(_libraries(b)) == 1
    assert _libraries(a)[0].compiled_graph is not _libraries(b)[0].compiled_graph


class ShortCut(Positions):
    """Other code at a sequence of 1: a graph of its own, traced after the first."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * 2 if x.shape[1] == 1 else super().forward(x)


def test_a_later_graphs_library_serves_a_batch_of_1_too():
    """dynamo's ranges start at 2 on graphs after the first (it specializes a size of 1);
    their libraries are compiled from 1, so that its graph for a batch of 1 runs one."""
    torch.manual_seed(0)
    model = ShortCut().eval()
    compiled = tt.compile(model, dynamic=True, fallback=False)
    with torch.no_grad():
        for b, t in [(3, 5), (3, 1), (1, 1), (1, 5)]:
            x = torch.randn(b, t, 16)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
    first, short, short_at_1, first_at_1 = compiled.taskloom_backend.compiled
    assert (first.reuses, short.reuses, short_at_1.reuses, first_at_1.reuses) == (None, None, short, first)


def test_a_static_compile_specializes_each_shape():
    """torch.compile(dynamic=False) asks for a compile specialized to each shape: its graphs
    run no library of a dynamic compile of the same model."""
    torch.manual_seed(0)
    model = Positions().eval()
    dynamic, static = tt.compile(model, dynamic=True, fallback=False), tt.compile(model, fallback=False)
    with torch.no_grad():
        for b, t in [(3, 5), (1, 5)]:
            x = torch.randn(b, t, 16)
            torch.testing.assert_close(dynamic(x), model(x), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(static(x), model(x), rtol=1e-5, atol=1e-6)
    assert [fn.reuses is None for fn in dynamic.taskloom_backend.compiled] == [True, False]
    assert [fn.reuses is None for fn in static.taskloom_backend.compiled] == [True, True]


#: Steps of the random programs below, some of them other code at a size of 1.
_STEPS = (
    lambda y, q: y.relu(),
    lambda y, q: y * 2.0 + q,
    lambda y, q: y.softmax(-1),
    lambda y, q: y.sum(0, keepdim=True).expand(y.shape[0], -1),
    lambda y, q: y * 3.0 if y.shape[0] == 1 else y * 2.0,  # another value at a batch of 1
    lambda y, q: y if y.shape[1] == 1 else y - y[:, :1],  # the same value at a length of 1
    lambda y, q: y[:, :1].expand(-1, y.shape[1]) + y,
    lambda y, q: y.reshape(-1).reshape(y.shape[0], -1).t().contiguous().t(),
    lambda y, q: torch.cat([y, y.flip(0)], 0)[: y.shape[0]],
)


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.integers(0, len(_STEPS) - 1), min_size=1, max_size=5),
       earlier=st.tuples(st.integers(2, 4), st.integers(2, 6)), later=st.tuples(st.integers(1, 4), st.integers(1, 6)))
def test_a_match_computes_what_the_later_graph_does(steps, earlier, later):
    """Whatever the program, a match is sound: the earlier graph run with the binding's
    arguments gives the later graph's output, which is the program's."""
    def program(x, p):
        y = _expands(x, p).reshape(x.shape[0], x.shape[1])
        for k in steps:
            y = _STEPS[k](y, p[:, : x.shape[1]])
        return y
    p = torch.randn(1, 16)
    first, second = (make_fx(program, tracing_mode="symbolic")(torch.randn(*s), p) for s in (earlier, later))
    binding = _match(first, second)
    if binding is None:
        return
    x = torch.randn(*later)
    torch.testing.assert_close(first(*binding.arguments([x, p])), program(x, p))
    torch.testing.assert_close(second(x, p), program(x, p))
