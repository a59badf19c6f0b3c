"""Advanced indexing, index_put and the scatters through ``torch.compile``: every layout of
indexed axes torch defines (leading, in the middle, separated by ``:``), against eager
torch, and a bad index from an input raising ``IndexOutOfRange`` as torch raises
``IndexError``."""
from __future__ import annotations

import pytest
import torch

from taskloom.errors import IndexOutOfRange

I = torch.tensor([[0, 2], [1, -1]])
J = torch.tensor([3, 1])


def put_middle(x):
    y = x.clone()
    y[:, I, J] = 7.0
    return y


def put_separated(x):
    y = x.clone()
    y[I, :, J] = torch.arange(6.0)
    return y


CASES = {
    "leading": lambda x: x[I, J],
    "middle": lambda x: x[:, I, J],
    "separated": lambda x: x[I, :, J],
    "one axis": lambda x: x[:, :, J],
    "put middle": put_middle,
    "put separated": put_separated,
    "put accumulate": lambda x: x.index_put((I, J), torch.ones(2, 2, 5, 6), accumulate=True),
    "scatter": lambda x: x.scatter(1, torch.zeros(3, 2, 5, 6, dtype=torch.long), x[:, :2]),
    "scatter value": lambda x: x.scatter(3, torch.ones(3, 4, 5, 1, dtype=torch.long), 2.5),
    "scatter_add": lambda x: x.scatter_add(2, torch.zeros(3, 4, 2, 6, dtype=torch.long), x[:, :, :2]),
    "scatter_reduce": lambda x: x.scatter_reduce(0, torch.tensor([[[[1] * 6] * 5] * 4]), x[:1], "amax"),
}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", CASES)
def test_indexing_matches_eager(name):
    fn = CASES[name]
    x = torch.randn(3, 4, 5, 6)
    torch.testing.assert_close(torch.compile(fn, backend="taskloom")(x), fn(x), rtol=1e-5, atol=1e-6)


def test_a_bad_index_from_an_input_raises():
    def pick(x, ids):
        return x[:, ids] * 2

    compiled = torch.compile(pick, backend="taskloom")
    x = torch.randn(3, 4)
    ids = torch.tensor([3, -4])
    torch.testing.assert_close(compiled(x, ids), pick(x, ids))
    with pytest.raises(IndexOutOfRange, match="index 4,"):
        compiled(x, torch.tensor([4, 0]))
    with pytest.raises(IndexError):  # as eager torch raises
        pick(x, torch.tensor([4, 0]))
    torch.testing.assert_close(compiled(x, ids), pick(x, ids))
