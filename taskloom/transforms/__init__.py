"""IR passes, each a function ``Function -> Function``, and the standard lowering pipeline."""
from __future__ import annotations

from taskloom.ir.stmt import Function
from taskloom.transforms.flatten import flatten_buffers
from taskloom.transforms.lower_mappings import lower_mappings


def lower(fn: Function) -> Function:
    """The passes between a scheduled function and code generation, in order:
    task mappings to loops, index simplification, buffer flattening, simplification again."""
    from taskloom.transforms.simplify import simplify
    fn = lower_mappings(fn)
    fn = simplify(fn)
    fn = flatten_buffers(fn)
    return simplify(fn)


__all__ = ["lower", "lower_mappings", "flatten_buffers"]
