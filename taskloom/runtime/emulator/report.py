"""What a kernel run in the emulator reports: its launch and its counters."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from taskloom.runtime.emulator.counters import INSTRUCTION_CLASSES, Counters


@dataclass
class EmulatorReport:
    """One launch of one kernel. The counters' fields read as the report's own
    (``report.bank_conflicts``, ``report.global_load_sectors``, ``report.instructions``)."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_shared: int = 0
    counters: Counters = field(default_factory=Counters)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "counters":
            raise AttributeError(name)
        return getattr(self.counters, name)

    @property
    def threads(self) -> int:
        g, b = self.grid, self.block
        return g[0] * g[1] * g[2] * b[0] * b[1] * b[2]

    def as_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "grid": self.grid, "block": self.block,
                "dynamic_shared": self.dynamic_shared, **self.counters.as_dict()}

    def summary(self) -> str:
        c = self.counters
        lines = [f"kernel '{self.kernel}': grid {self.grid} x block {self.block} ({self.threads} threads), "
                 f"{self.dynamic_shared} bytes of dynamic shared memory"]
        counts = ", ".join(f"{k.replace('_', ' ')} {c.instructions.get(k, 0)}" for k in INSTRUCTION_CLASSES)
        lines.append(f"  warp instructions: {counts}")
        for kind in ("load", "store"):
            req, sec = getattr(c, f"global_{kind}_requests"), getattr(c, f"global_{kind}_sectors")
            per = f" ({sec / req:.2f} per request)" if req else ""
            lines.append(f"  global {kind}s: {req} requests, {sec} sectors{per}")
        for kind in ("load", "store"):
            req = getattr(c, f"shared_{kind}_requests")
            waves, conf = getattr(c, f"shared_{kind}_wavefronts"), getattr(c, f"shared_{kind}_conflicts")
            lines.append(f"  shared {kind}s: {req} requests, {waves} wavefronts, {conf} bank conflicts")
        lines.append(f"  barriers: {c.barriers} (passed by a block, summed over blocks)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()
