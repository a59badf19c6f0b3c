"""Hardware targets: what the generated code is built for.

``get_target`` turns a user's argument into a target: ``None`` or ``"cpu [options]"`` a
:class:`CpuTarget` read from this machine, ``"cuda"`` this machine's GPU, ``"cuda:sm_90"`` a
:class:`CudaTarget` named by architecture (no GPU needed).
"""
from __future__ import annotations

from typing import Any

from taskloom.errors import TargetError
from taskloom.target.base import Target
from taskloom.target.cpu import KNOWN_FLAGS, CpuTarget, host_target
from taskloom.target.cuda import CudaTarget

#: Every target kind, by the first word of its string.
KINDS: dict[str, type[Target]] = {"cpu": CpuTarget, "cuda": CudaTarget}


def get_target(spec: str | Target | None) -> Target:
    """Resolve a user's target argument: ``None`` is this machine's CPU, a string is parsed,
    a target is returned as it is."""
    if spec is None:
        return CpuTarget.host()
    if isinstance(spec, Target):
        return spec
    if isinstance(spec, str):
        kind = spec.split(maxsplit=1)[0].partition(":")[0] if spec.strip() else ""
        if kind not in KINDS:
            raise TargetError(f"unknown target {spec!r}; expected 'cpu [-isa=...] [-cores=N]', "
                              f"'cuda' (this machine's GPU) or 'cuda:<arch>' (e.g. 'cuda:sm_90')")
        return KINDS[kind].from_string(spec)
    raise TargetError(f"a target is a string like 'cpu -isa=avx2' or 'cuda:sm_90', a Target, or None; "
                      f"got {spec!r}")


def get_cpu_target(spec: str | Target | None, what: str) -> CpuTarget:
    """:func:`get_target` for a path that builds CPU code only; ``what`` names it in the error."""
    target = get_target(spec)
    if not isinstance(target, CpuTarget):
        raise TargetError(f"{what} builds for the CPU only, and {target.key()} was asked for; "
                          f"pass target=None or 'cpu'")
    return target


def target_from_dict(data: dict[str, Any]) -> Target:
    """Rebuild any target written by its ``to_dict`` (saved models, records)."""
    kind = data.get("kind", "cpu") if isinstance(data, dict) else None
    if kind not in KINDS:
        raise TargetError(f"unknown target kind {kind!r} in a target description; known: {', '.join(KINDS)}")
    return KINDS[kind].from_dict(data)


__all__ = ["KINDS", "KNOWN_FLAGS", "CpuTarget", "CudaTarget", "Target", "get_cpu_target", "get_target", "host_target",
           "target_from_dict"]
