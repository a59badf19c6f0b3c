"""Hardware targets: what the generated code is built for."""
from taskloom.target.cpu import KNOWN_FLAGS, CpuTarget, get_target, host_target

__all__ = ["KNOWN_FLAGS", "CpuTarget", "get_target", "host_target"]
