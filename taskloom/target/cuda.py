"""The NVIDIA GPU target: architecture, SMs, shared memory, registers, L2.

A CUDA target can be named without a GPU (``"cuda:sm_90"`` gives an H100's numbers, enough
to generate, compile and emulate code for it) and read from the device when there is one
(``"cuda"``). Templates ask it for the limits a kernel must fit (shared memory per block,
registers per thread) and the analytic model for the numbers it prices with (SMs, clock).
"""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import Any

from taskloom.errors import TargetError
from taskloom.target.base import Target

KIB, MIB = 1024, 1024 * 1024

#: Per-architecture facts, and the numbers of one common part of each (its SMs, L2, boost
#: clock and DRAM bandwidth) for when no device is at hand to read them from.
ARCHS: dict[str, dict[str, Any]] = {
    "sm_80": dict(name="NVIDIA A100-SXM4 (sm_80 preset)", num_sms=108, max_threads_per_sm=2048,
                  shared_memory_per_sm=164 * KIB, shared_memory_per_block=163 * KIB,
                  l2_bytes=40 * MIB, clock_mhz=1410, dram_gbs=1555),
    "sm_86": dict(name="NVIDIA A10 (sm_86 preset)", num_sms=72, max_threads_per_sm=1536,
                  shared_memory_per_sm=100 * KIB, shared_memory_per_block=99 * KIB,
                  l2_bytes=6 * MIB, clock_mhz=1695, dram_gbs=600),
    "sm_89": dict(name="NVIDIA L4 (sm_89 preset)", num_sms=58, max_threads_per_sm=1536,
                  shared_memory_per_sm=100 * KIB, shared_memory_per_block=99 * KIB,
                  l2_bytes=48 * MIB, clock_mhz=2040, dram_gbs=300),
    "sm_90": dict(name="NVIDIA H100-SXM5 (sm_90 preset)", num_sms=132, max_threads_per_sm=2048,
                  shared_memory_per_sm=228 * KIB, shared_memory_per_block=227 * KIB,
                  l2_bytes=50 * MIB, clock_mhz=1980, dram_gbs=3352),
}
_ARCH = re.compile(r"sm_(?P<major>\d)(?P<minor>\d)(?P<a>a?)")
#: a CUDA target string's options, and the field each sets
OPTIONS = {"-tf32": "tf32"}


@dataclass(frozen=True)
class CudaTarget(Target):
    """An NVIDIA GPU to generate and build CUDA code for.

    ``arch`` is what nvcc builds for (``sm_80``, ``sm_90a``: the ``a`` unlocks Hopper's
    architecture-specific instructions, wgmma and TMA); the rest are that GPU's limits.
    Memory sizes are in bytes. ``tf32`` allows float32 products on the tensor cores as
    tf32 (10 bits of mantissa: the trade ``torch.backends.cuda.matmul.allow_tf32`` makes);
    off by default, since it changes results in their fourth digit. The factors are rounded
    to nearest tf32 first (``cvt.rna``, as cuBLAS does), not cut by the tensor cores, whose
    cut would bias every product toward zero.
    """

    kind = "cuda"

    arch: str
    name: str
    num_sms: int
    shared_memory_per_block: int  # the most one block may opt in to
    shared_memory_per_sm: int
    l2_bytes: int
    clock_mhz: int
    max_threads_per_sm: int = 2048
    dram_gbs: int = 2000  # DRAM bandwidth, GB/s (a description written before it was kept takes this)
    registers_per_sm: int = 64 * 1024
    registers_per_thread: int = 255
    max_threads_per_block: int = 1024
    warp_size: int = 32
    tf32: bool = False

    def __post_init__(self) -> None:
        if not _ARCH.fullmatch(self.arch) or _base_arch(self.arch) not in ARCHS:
            raise TargetError(f"unknown CUDA architecture {self.arch!r}; known: "
                              f"{', '.join(_arch_names())}")
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type == "int" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise TargetError(f"CudaTarget.{field.name} must be a positive integer, got {value!r}")
        if not isinstance(self.tf32, bool):
            raise TargetError(f"CudaTarget.tf32 must be True or False, got {self.tf32!r}")

    # -- constructors -------------------------------------------------------------------

    @classmethod
    def from_arch(cls, arch: str) -> CudaTarget:
        """The preset GPU of an architecture (``"sm_90"``, ``"sm_90a"``), no device needed."""
        if not _ARCH.fullmatch(arch) or _base_arch(arch) not in ARCHS:
            raise TargetError(f"unknown CUDA architecture {arch!r}; known: {', '.join(_arch_names())}")
        return cls(arch=arch, **ARCHS[_base_arch(arch)])

    @classmethod
    def device(cls, index: int = 0) -> CudaTarget:
        """The GPU ``index`` of this machine, read from the driver."""
        found = _read_device(index)
        if found is None:
            raise TargetError("target 'cuda' names this machine's GPU, and none was found "
                              "(no driver, no device, or neither cuda-bindings nor torch with CUDA "
                              "installed); name an architecture to compile without one, e.g. "
                              "'cuda:sm_90' or 'cuda:sm_80', and run it with device='emulator'")
        return found

    @classmethod
    def from_string(cls, spec: str) -> CudaTarget:
        """Parse ``"cuda"`` (this machine's GPU) or ``"cuda:sm_XY[a]"`` (an architecture),
        followed by options: ``-tf32`` (float32 products on the tensor cores as tf32).

        An architecture that matches this machine's GPU takes the GPU's own numbers.
        """
        word, *options = spec.split() or [""]
        unknown = [o for o in options if o not in OPTIONS]
        if unknown:
            raise TargetError(f"unknown option {unknown[0]!r} in CUDA target {spec!r}; known: {', '.join(OPTIONS)}")
        flags = {OPTIONS[o]: True for o in options}
        if word == "cuda":
            return dataclasses.replace(cls.device(), **flags)
        kind, colon, arch = word.partition(":")
        if kind != "cuda" or not colon or not arch:
            raise TargetError(f"unknown CUDA target {spec!r}; expected 'cuda' or 'cuda:<arch>' "
                              f"with <arch> among {', '.join(_arch_names())}, then options ({', '.join(OPTIONS)})")
        target = cls.from_arch(arch)
        here = _read_device(0)
        if here is not None and _base_arch(here.arch) == _base_arch(arch):
            target = dataclasses.replace(here, arch=arch)
        return dataclasses.replace(target, **flags)

    # -- queries ------------------------------------------------------------------------

    @property
    def is_gpu(self) -> bool:
        return True

    @property
    def compute_capability(self) -> tuple[int, int]:
        """``(9, 0)`` for ``sm_90`` and ``sm_90a``."""
        m = _ARCH.fullmatch(self.arch)
        return int(m["major"]), int(m["minor"])

    def nhwc_channel_multiple(self) -> int | None:
        """8: a 16-byte run of 16-bit channels, what the tensor-core templates copy a
        convolution's window by (one cp.async a pixel's 8 channels)."""
        return 8

    def nhwc_dtypes(self) -> tuple[str, ...]:
        return ("float16", "bfloat16")

    def has_wgmma(self) -> bool:
        """Whether Hopper's warpgroup MMA and TMA may be used (``sm_90a`` only)."""
        return self.arch == "sm_90a"

    def cache_bytes_between_kernels(self) -> int:
        """The GPU's L2, which every SM shares."""
        return self.l2_bytes

    def nvcc_flags(self) -> list[str]:
        """The nvcc flags that build for this target. An architecture-specific one
        (``sm_90a``) is named in full: nvcc's ``-arch=sm_90a`` also builds PTX for plain
        ``compute_90``, which refuses wgmma."""
        if self.arch.endswith("a"):
            return ["-gencode", f"arch=compute_{self.arch[3:]},code=sm_{self.arch[3:]}"]
        return [f"-arch={self.arch}"]

    def runs_on(self, device: CudaTarget) -> bool:
        """Whether code built for this target runs on ``device``: the same major
        architecture, no older minor one, and ``sm_90a`` code only on compute capability 9.0."""
        (major, minor), (dmajor, dminor) = self.compute_capability, device.compute_capability
        if self.arch.endswith("a"):
            return (major, minor) == (dmajor, dminor)
        return major == dmajor and minor <= dminor

    def key(self) -> str:
        """``cuda-sm_90a`` (``cuda-sm_90a-tf32``): what the code depends on, for caches,
        records and saved models."""
        return f"cuda-{self.arch}" + ("-tf32" if self.tf32 else "")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description; :meth:`from_dict` reverses it."""
        return {"kind": "cuda", **dataclasses.asdict(self)}


def _base_arch(arch: str) -> str:
    return arch.rstrip("a")


def _arch_names() -> list[str]:
    return [*ARCHS, "sm_90a"]


@functools.lru_cache(maxsize=None)
def _read_device(index: int) -> CudaTarget | None:
    """GPU ``index`` as a target, or None where no driver or device answers.

    Reads attributes through the driver API of NVIDIA's ``cuda-bindings`` (no context is
    created), else through torch; neither is a dependency of taskloom."""
    for reader in (_read_with_cuda_bindings, _read_with_torch):
        try:
            props = reader(index)
        except Exception:  # an absent package, driver or device all read as "none here"
            props = None
        if props is not None:
            return _from_properties(props)
    return None


def _from_properties(p: dict[str, Any]) -> CudaTarget | None:
    arch = f"sm_{p['major']}{p['minor']}"
    if arch not in ARCHS:
        return None  # a GPU taskloom has no numbers for: treated as absent, named by arch instead
    preset = ARCHS[arch]
    return CudaTarget(
        arch="sm_90a" if arch == "sm_90" else arch, name=p.get("name") or preset["name"],
        num_sms=p.get("num_sms") or preset["num_sms"],
        shared_memory_per_block=p.get("shared_memory_per_block") or preset["shared_memory_per_block"],
        shared_memory_per_sm=p.get("shared_memory_per_sm") or preset["shared_memory_per_sm"],
        l2_bytes=p.get("l2_bytes") or preset["l2_bytes"],
        clock_mhz=p.get("clock_mhz") or preset["clock_mhz"],
        max_threads_per_sm=p.get("max_threads_per_sm") or preset["max_threads_per_sm"],
        dram_gbs=_dram_gbs(p) or preset["dram_gbs"])


def _dram_gbs(p: dict[str, Any]) -> int:
    """DRAM bandwidth from the memory clock (kHz) and bus width (bits), double data rate;
    0 where the reader gave neither."""
    return 2 * p.get("memory_clock_khz", 0) * p.get("memory_bus_bits", 0) // 8 // 1_000_000


def _read_with_cuda_bindings(index: int) -> dict[str, Any] | None:
    from cuda.bindings import driver

    def check(result: tuple) -> Any:
        if int(result[0]) != 0:
            raise RuntimeError(f"CUDA driver error {result[0]}")
        return result[1] if len(result) == 2 else result[1:]

    check(driver.cuInit(0)[:1] + (None,))
    dev = check(driver.cuDeviceGet(index))
    attr = driver.CUdevice_attribute

    def get(name: str) -> int:
        return int(check(driver.cuDeviceGetAttribute(getattr(attr, name), dev)))
    raw = check(driver.cuDeviceGetName(256, dev))
    return {"name": bytes(raw).split(b"\0")[0].decode(errors="replace"),
            "major": get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
            "minor": get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"),
            "num_sms": get("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
            "shared_memory_per_block": get("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            "shared_memory_per_sm": get("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
            "l2_bytes": get("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
            "clock_mhz": get("CU_DEVICE_ATTRIBUTE_CLOCK_RATE") // 1000,
            "max_threads_per_sm": get("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR"),
            "memory_clock_khz": get("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE"),
            "memory_bus_bits": get("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH")}


def _read_with_torch(index: int) -> dict[str, Any] | None:
    import torch

    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    p = torch.cuda.get_device_properties(index)
    return {"name": p.name, "major": p.major, "minor": p.minor, "num_sms": p.multi_processor_count,
            "l2_bytes": getattr(p, "L2_cache_size", 0),
            "shared_memory_per_block": getattr(p, "shared_memory_per_block_optin", 0),
            "shared_memory_per_sm": getattr(p, "shared_memory_per_multiprocessor", 0),
            "max_threads_per_sm": getattr(p, "max_threads_per_multi_processor", 0),
            "memory_clock_khz": getattr(p, "memory_clock_rate", 0),
            "memory_bus_bits": getattr(p, "memory_bus_width", 0)}
