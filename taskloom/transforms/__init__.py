"""IR passes, each a function ``Function -> Function``, and the standard lowering pipeline."""
from __future__ import annotations

from taskloom.ir.stmt import Function
from taskloom.transforms.flatten import flatten_buffers
from taskloom.transforms.hoist_checks import hoist_checks
from taskloom.transforms.lower_mappings import lower_mappings


def lower(fn: Function) -> Function:
    """The passes between a scheduled function and code generation, in order:
    task mappings to loops, index simplification, buffer flattening, simplification again,
    run-time index checks out of the loops that do not change them.
    A function with run-time checks is marked (``status``) first: simplification may prove
    every check redundant, but the function still takes the status its callers pass."""
    from taskloom.transforms.simplify import simplify
    if fn.reports_status and not fn.attr("status"):
        fn = Function(fn.name, fn.params, fn.body, fn.kind, (*fn.attrs, ("status", True)))
    fn = lower_mappings(fn)
    fn = simplify(fn)
    fn = flatten_buffers(fn)
    return hoist_checks(simplify(fn))


__all__ = ["lower", "lower_mappings", "flatten_buffers", "hoist_checks"]
