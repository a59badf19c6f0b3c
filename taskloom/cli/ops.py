"""``taskloom ops onnx|torch [--missing]``: which operators each frontend converts, against
the whole of ONNX's default domain and of PyTorch's core ATen set, so a user can see
before converting whether a model's operators are covered (and the README's lists stay
true: a test compares them with this command's)."""
from __future__ import annotations

import argparse
from typing import Any


def onnx_coverage() -> tuple[list[str], list[str]]:
    """(converted, not converted): the operators of ONNX's default domain (not deprecated),
    by name, as the installed ``onnx`` package defines them."""
    import onnx

    from taskloom.onnx import supported_ops
    names = sorted({s.name for s in onnx.defs.get_all_schemas_with_history()
                    if s.domain in ("", "ai.onnx") and not s.deprecated})
    have = supported_ops()
    return [n for n in names if n in have], [n for n in names if n not in have]


def torch_coverage() -> tuple[list[str], list[str]]:
    """(converted, not converted): the overloads of PyTorch's core ATen operator set (the
    operators its decompositions end in), as the installed ``torch`` tags them; one the
    frontend decomposes further before converting counts as converted."""
    import torch

    from taskloom.frontend import torch_aten, torch_aten_math, torch_aten_nn, torch_convert  # noqa: F401
    from taskloom.frontend.torch_lower import FAST_PATH_DECOMPOSITIONS, decomposition_table
    # an overload the frontend decomposes first (upsampling, into gathers) converts too
    registry: Any = {**torch_aten.REGISTRY, **decomposition_table(), **FAST_PATH_DECOMPOSITIONS}
    converted, missing = [], []
    # every registered aten operator (``dir(torch.ops.aten)`` lists only those already looked up)
    names = {n.split("::", 1)[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")}
    for name in sorted(names):
        try:
            packet = getattr(torch.ops.aten, name)
            overloads = packet.overloads()
        except Exception:
            continue
        for ov in overloads:
            op = getattr(packet, ov)
            if torch.Tag.core in op.tags:
                (converted if packet in registry or op in registry else missing).append(f"aten.{name}.{ov}")
    return converted, missing


def _ops(args: argparse.Namespace) -> int:
    converted, missing = onnx_coverage() if args.frontend == "onnx" else torch_coverage()
    what = "ONNX operators (default domain)" if args.frontend == "onnx" else "core ATen overloads"
    print(f"{len(converted)} of {len(converted) + len(missing)} {what} convert; {len(missing)} do not")
    for name in missing if args.missing else converted:
        print(f"  {name}")
    return 0


def add_ops_command(commands: argparse._SubParsersAction) -> None:
    """Register ``ops onnx|torch [--missing]``."""
    p = commands.add_parser("ops", help="list the operators a frontend converts (or, with --missing, does not)")
    p.add_argument("frontend", choices=("onnx", "torch"))
    p.add_argument("--missing", action="store_true", help="list the operators that do not convert")
    p.set_defaults(func=_ops)
