"""The x86-64 CPU target: ISA flags, usable cores and cache sizes.

A target is read from the machine (:meth:`CpuTarget.host`) or derived from it with
overrides (``"cpu -isa=avx2 -cores=1"``). Code generation asks it for vector widths and
cache sizes; the compiler driver asks it for the gcc flags that build for it.
"""
from __future__ import annotations

import dataclasses
import functools
import operator
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskloom.errors import TargetError
from taskloom.target.base import Target

#: Every ISA flag a target may carry, in canonical order (the order of key() and cflags()).
KNOWN_FLAGS: tuple[str, ...] = (
    "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq",
    "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_tile",
)

# The gcc spelling of each flag, as in -m<name> and -mno-<name>.
_GCC_NAMES = {
    "sse4_2": "sse4.2", "avx": "avx", "avx2": "avx2", "fma": "fma",
    "avx512f": "avx512f", "avx512bw": "avx512bw", "avx512vl": "avx512vl", "avx512dq": "avx512dq",
    "avx512_bf16": "avx512bf16", "avx512_vnni": "avx512vnni", "avx512_fp16": "avx512fp16",
    "amx_tile": "amx-tile",
}

_AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma"})
_AVX512 = _AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}

# -isa=<level> -> (flags the level may keep from the base target, flags it guarantees).
# Guaranteed flags the base lacks make a cross-build target.
ISA_LEVELS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "sse4_2": (frozenset({"sse4_2"}), frozenset({"sse4_2"})),
    "avx2": (_AVX2, _AVX2),
    "avx512": (frozenset(KNOWN_FLAGS), _AVX512),
}

_OPTIONS = ("-isa", "-cores")
_DEFAULT_L1D, _DEFAULT_L2, _DEFAULT_L3 = 32 * 1024, 1024 * 1024, 8 * 1024 * 1024
_SIZE_UNITS = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}


@dataclass(frozen=True)
class CpuTarget(Target):
    """An x86-64 CPU to generate and build code for.

    ``isa`` holds the flags of :data:`KNOWN_FLAGS` the CPU supports; the cache sizes are
    those one core sees, in bytes.
    """

    kind = "cpu"

    name: str
    num_cores: int
    isa: frozenset[str]
    l1d_bytes: int = _DEFAULT_L1D
    l2_bytes: int = _DEFAULT_L2
    l3_bytes: int = _DEFAULT_L3

    def __post_init__(self) -> None:
        object.__setattr__(self, "isa", frozenset(self.isa))
        unknown = sorted(self.isa - set(KNOWN_FLAGS))
        if unknown:
            raise TargetError(f"unknown ISA flag(s) {', '.join(unknown)} in CpuTarget; "
                              f"valid flags: {', '.join(KNOWN_FLAGS)}")
        for field in ("num_cores", "l1d_bytes", "l2_bytes", "l3_bytes"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TargetError(f"CpuTarget.{field} must be a positive integer, got {value!r}")

    # -- constructors -------------------------------------------------------------------

    @staticmethod
    def host() -> CpuTarget:
        """The machine this process runs on; read once per process."""
        return _read_host()

    @classmethod
    def from_string(cls, spec: str) -> CpuTarget:
        """Parse ``"cpu [-isa=sse4_2|avx2|avx512] [-cores=N]"``: the host, with overrides."""
        words = spec.split()
        if not words or words[0] != "cpu":
            raise TargetError(f"unknown target {spec!r}; expected 'cpu' followed by options "
                              f"among {', '.join(o + '=...' for o in _OPTIONS)}")
        target = cls.host()
        for word in words[1:]:
            option, eq, value = word.partition("=")
            if option not in _OPTIONS or not eq or not value:
                raise TargetError(f"unknown target option {word!r} in {spec!r}; valid options: "
                                  f"-isa=<{'|'.join(ISA_LEVELS)}>, -cores=<positive int>")
            if option == "-isa":
                target = target.with_isa(value)
            else:
                try:
                    cores = int(value)
                except ValueError:
                    raise TargetError(f"-cores expects a positive integer, got {value!r} in {spec!r}") from None
                target = target.with_cores(cores)
        return target

    def with_isa(self, level: str) -> CpuTarget:
        """This target restricted (or raised, for cross-builds) to an ISA level."""
        if level not in ISA_LEVELS:
            raise TargetError(f"unknown ISA level {level!r}; valid levels: {', '.join(ISA_LEVELS)}")
        keep, require = ISA_LEVELS[level]
        return dataclasses.replace(self, isa=(self.isa & keep) | require)

    def with_cores(self, num_cores: int) -> CpuTarget:
        """This target using ``num_cores`` cores."""
        if isinstance(num_cores, bool) or not isinstance(num_cores, int) or num_cores < 1:
            raise TargetError(f"the number of cores must be a positive integer, got {num_cores!r}")
        return dataclasses.replace(self, num_cores=num_cores)

    # -- queries ------------------------------------------------------------------------

    def has(self, flag: str) -> bool:
        """Whether the target supports ISA ``flag`` (one of :data:`KNOWN_FLAGS`)."""
        if flag not in KNOWN_FLAGS:
            raise TargetError(f"unknown ISA flag {flag!r}; valid flags: {', '.join(KNOWN_FLAGS)}")
        return flag in self.isa

    @property
    def vector_bits(self) -> int:
        """Width of the widest vector register the generated code may use."""
        if "avx512f" in self.isa:
            return 512
        return 256 if "avx2" in self.isa else 128

    @property
    def num_vector_registers(self) -> int:
        """Number of architectural vector registers (zmm0-31 with AVX-512, else 16)."""
        return 32 if "avx512f" in self.isa else 16

    def vector_lanes(self, dtype: Any) -> int:
        """Elements of a vector register for an element size: an int of bytes or an object with ``nbytes``."""
        raw = getattr(dtype, "nbytes", dtype)
        try:
            nbytes = operator.index(raw)
        except TypeError:
            raise TargetError(f"vector_lanes expects an element size in bytes or a dtype with "
                              f"'nbytes', got {dtype!r}") from None
        width = self.vector_bits // 8
        if isinstance(raw, bool) or nbytes < 1 or width % nbytes:
            raise TargetError(f"element size {nbytes} bytes does not divide a {width}-byte vector")
        return width // nbytes

    def cache_bytes_between_kernels(self) -> int:
        """Every core's L2: what a kernel's data finds again in the next kernel."""
        return self.num_cores * self.l2_bytes

    def streams_weights(self, weight_bytes: int) -> bool:
        """Weights larger than the cores' L2 caches together are evicted by the other
        kernels' before their next call: the matmul template then prefetches its panels."""
        return weight_bytes > self.cache_bytes_between_kernels()

    def weights_outgrow_l3(self, weight_bytes: int) -> bool:
        """Weights past half the L3 come from memory on every call: half, since the
        activations and the other kernels' data share it."""
        return weight_bytes > self.l3_bytes // 2

    def nhwc_channel_multiple(self) -> int | None:
        """16, the widest x86 vector of floats (AVX-512's; AVX2's 8 divide it), so that one
        layout choice serves both instruction sets."""
        return 16

    def nhwc_stems(self) -> bool:
        """True: the pooling after a stem then vectorizes over its channels, and the matmul
        template copies the stem's window by runs of a row's channels."""
        return True

    def writes_blocks_in_place(self) -> bool:
        """True: vector loads and stores take any address (a CUDA kernel's 16-byte vectors
        need their rows aligned, so there it is off)."""
        return True

    def nhwc_pads_windows(self) -> bool:
        """True: the matmul template then reads the window in place, no copy of it packed
        (:func:`~taskloom.schedule.contraction.a_window_run`); the pad is one pass over the
        input, where packing copies each element once per tap."""
        return True

    def runs_on_host(self, host: CpuTarget | None = None) -> bool:
        """Whether code built for this target runs on ``host`` (default: this machine)."""
        return self.isa <= (host or CpuTarget.host()).isa

    def cflags(self, host: CpuTarget | None = None) -> list[str]:
        """The gcc flags that build for this target on ``host`` (default: this machine).

        A target the host can run gets ``-march=native`` (tuning for the host) minus every
        host feature the target lacks; otherwise each target feature is enabled explicitly.
        """
        host = host or CpuTarget.host()
        if self.isa <= host.isa:
            return ["-march=native"] + [f"-mno-{_GCC_NAMES[f]}" for f in KNOWN_FLAGS
                                        if f in host.isa and f not in self.isa]
        return [f"-m{_GCC_NAMES[f]}" for f in KNOWN_FLAGS if f in self.isa]

    def key(self) -> str:
        """A short stable name of the instruction set, for cache keys and saved files."""
        return "-".join(["x86_64"] + [f for f in KNOWN_FLAGS if f in self.isa])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description; :meth:`from_dict` reverses it."""
        return {
            "kind": "cpu", "name": self.name, "num_cores": self.num_cores,
            "isa": [f for f in KNOWN_FLAGS if f in self.isa],
            "l1d_bytes": self.l1d_bytes, "l2_bytes": self.l2_bytes, "l3_bytes": self.l3_bytes,
        }


def host_target() -> CpuTarget:
    """The machine this process runs on."""
    return CpuTarget.host()


def target_of_key(key: str) -> CpuTarget:
    """A target with the ISA that ``key`` (:meth:`CpuTarget.key`, as a tuning record holds
    it) names, on one core with default caches; a flag this taskloom does not know is a
    :class:`TargetError`."""
    _, _, flags = key.partition("-")
    return CpuTarget(key, 1, frozenset(flags.split("-") if flags else ()))


# -- reading the machine --------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _read_host() -> CpuTarget:
    name, flags = _read_cpuinfo(Path("/proc/cpuinfo"))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    l1d, l2, l3 = _read_cache_sizes(Path("/sys/devices/system/cpu/cpu0/cache"))
    return CpuTarget(name=name, num_cores=cores, isa=flags & set(KNOWN_FLAGS),
                     l1d_bytes=l1d, l2_bytes=l2, l3_bytes=l3)


def _read_cpuinfo(path: Path) -> tuple[str, frozenset[str]]:
    """The model name and the flags of the first processor listed in ``path``."""
    name, flags = "", frozenset()
    try:
        lines = path.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not name:
            name = value.strip()
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
    return name or platform.processor() or "unknown x86-64", flags


def _read_cache_sizes(root: Path) -> tuple[int, int, int]:
    """L1 data, L2 and L3 sizes seen by the core whose cache directory is ``root``."""
    found: dict[int, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified"):
            found.setdefault(level, size)
    return found.get(1, _DEFAULT_L1D), found.get(2, _DEFAULT_L2), found.get(3, _DEFAULT_L3)


def _parse_size(text: str) -> int:
    """``"48K"`` -> 49152."""
    text = text.strip().upper()
    if text and text[-1] in _SIZE_UNITS:
        return int(text[:-1]) * _SIZE_UNITS[text[-1]]
    return int(text)
