"""A once-per-machine hardware probe: the peak rates an analytic performance model reads.

The model needs to know how fast a CPU computes and how fast it reads from each level of
its memory. :func:`probe` measures that with a small C library built for the target: fp32
vector FMA throughput on one core and on every core, and read bandwidth from L1, L2, L3
and DRAM. :func:`save_profile` keeps the result in ``target.json`` beside the tuning
records (under the build cache's root), keyed by the target's ISA key; :func:`profile_for`
reads it back, scaled to the target's core count, or falls back to :func:`estimate`, a
rough guess from the ISA alone, on a machine nobody probed. :func:`override` replaces
numbers the user knows better (``taskloom target probe --set mem_gbs=40``).

Every number is an achievable peak: each measurement keeps the fastest of several repeats,
because noise from other processes only ever slows a run down.
"""
from __future__ import annotations

import ctypes
import dataclasses
import datetime
import json
import math
import numbers
import os
import re
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from taskloom.backend.cache import BuildCache
from taskloom.errors import TargetError
from taskloom.target.cpu import CpuTarget

#: The name of the profile file under the build cache's root (beside ``tune.sqlite``).
FILE_NAME = "target.json"

#: The numeric fields of :class:`HardwareProfile`, with their unit and meaning.
FIELDS: dict[str, tuple[str, str]] = {
    "fma_gflops_core": ("GFLOP/s", "fp32 vector FMA, one core"),
    "fma_gflops_all": ("GFLOP/s", "fp32 vector FMA, every core"),
    "l1_gbs": ("GB/s", "read from L1, one core"),
    "l2_gbs": ("GB/s", "read from L2, one core"),
    "l3_gbs": ("GB/s", "read from L3, every core"),
    "mem_gbs_core": ("GB/s", "read from DRAM, one core"),
    "mem_gbs": ("GB/s", "read from DRAM, every core"),
}

ESTIMATED = "estimated from the ISA"
_OVERRIDDEN = re.compile(r"^(?P<base>.*) \(overridden: (?P<keys>[^()]*)\)$")


@dataclass(frozen=True)
class HardwareProfile:
    """What the analytic model needs of a CPU: peak fp32 FMA rates and read bandwidths.

    Rates are in GFLOP/s (an FMA counts 2 flops per lane) and GB/s (1e9 bytes). ``source``
    says where the numbers come from: ``"probed <iso date>"``, ``"estimated from the ISA"``,
    either followed by ``" (overridden: key, key)"`` when the user replaced some.
    """

    fma_gflops_core: float  # fp32 GFLOP/s of one core running independent vector FMAs
    fma_gflops_all: float   # the same with every core of the target busy
    l1_gbs: float           # read bandwidth of one core from its L1
    l2_gbs: float           # one core from its L2
    l3_gbs: float           # all cores together from L3
    mem_gbs_core: float     # one core alone from DRAM
    mem_gbs: float          # all cores together from DRAM
    source: str

    def __post_init__(self) -> None:
        for name in FIELDS:
            object.__setattr__(self, name, _positive(getattr(self, name), name))
        if not isinstance(self.source, str):
            raise TargetError(f"HardwareProfile.source must be a string, got {self.source!r}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description; :meth:`from_dict` reverses it."""
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> HardwareProfile:
        """Rebuild a profile written by :meth:`to_dict`; keys it does not know are ignored."""
        if not isinstance(d, Mapping):
            raise TargetError(f"a hardware profile is a JSON object, got {type(d).__name__}")
        missing = [name for name in (*FIELDS, "source") if name not in d]
        if missing:
            raise TargetError(f"hardware profile lacks {', '.join(missing)}; a profile holds "
                              f"{', '.join(FIELDS)} and source")
        return HardwareProfile(**{name: d[name] for name in (*FIELDS, "source")})

    def for_cores(self, cores: int, probed_cores: int) -> HardwareProfile:
        """This profile, measured with ``probed_cores`` cores, for a target using ``cores``.

        One-core numbers stay. FMA throughput and L3 bandwidth scale linearly with the
        cores (each core has its own FMA units and L3 slice); DRAM bandwidth is the smaller
        of the measured all-core figure and ``cores`` times the one-core figure, since a
        few cores cannot saturate the memory controllers and many cannot exceed them. Meant
        for fewer cores than probed; more cores extrapolate the same way.
        """
        for name, value in (("cores", cores), ("probed_cores", probed_cores)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TargetError(f"for_cores: {name} must be a positive integer, got {value!r}")
        if cores == probed_cores:
            return self
        ratio = cores / probed_cores
        return dataclasses.replace(self, fma_gflops_all=self.fma_gflops_all * ratio,
                                   l3_gbs=self.l3_gbs * ratio,
                                   mem_gbs=min(self.mem_gbs, cores * self.mem_gbs_core))


def _positive(value: Any, name: str) -> float:
    """``value`` as a float if it is a finite positive real number, else a TargetError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or value <= 0:
        raise TargetError(f"hardware profile value {name} must be a positive finite number, got "
                          f"{value!r}")
    return float(value)


# -- estimate and override ------------------------------------------------------------------

_NOMINAL_GHZ = 2.5          # a typical sustained all-core clock
_FMA_PORTS = 2              # vector FMA units per core (one on some client parts: rough)
_L1_LOADS_PER_CYCLE = 2     # vector loads per cycle from L1
_L2_BYTES_PER_CYCLE = 32    # one 64-byte line every other cycle
_L3_GBS_PER_CORE = 10.0
_MEM_GBS_CORE = 10.0        # one core: bounded by its outstanding misses, not by the DIMMs
_MEM_GBS_PER_CORE = 8.0     # all cores: each adds this much ...
_MEM_GBS_CAP = 200.0        # ... up to about eight channels of DDR4-3200 / DDR5


def estimate(target: CpuTarget) -> HardwareProfile:
    """A rough profile from the ISA and core count alone, without measuring anything.

    Assumes a nominal 2.5 GHz, two vector FMA ports (one multiply and one add port
    without FMA), two vector loads per cycle from L1, 32 bytes per cycle from L2,
    10 GB/s per core from L3, 10 GB/s from DRAM for one core and 8 GB/s per core for all
    of them up to 200 GB/s. Real machines differ by 2x either way; it is what the model
    reads where nobody ran :func:`probe`.
    """
    lanes = target.vector_bits // 32
    flops_per_cycle = _FMA_PORTS * lanes * 2 if target.has("fma") else 2 * lanes
    fma_core = flops_per_cycle * _NOMINAL_GHZ
    cores = target.num_cores
    return HardwareProfile(
        fma_gflops_core=fma_core,
        fma_gflops_all=fma_core * cores,
        l1_gbs=_L1_LOADS_PER_CYCLE * (target.vector_bits // 8) * _NOMINAL_GHZ,
        l2_gbs=_L2_BYTES_PER_CYCLE * _NOMINAL_GHZ,
        l3_gbs=_L3_GBS_PER_CORE * cores,
        mem_gbs_core=_MEM_GBS_CORE,
        # never below one core's figure: one core alone is no faster than all of them
        mem_gbs=max(_MEM_GBS_CORE, min(_MEM_GBS_PER_CORE * cores, _MEM_GBS_CAP)),
        source=ESTIMATED,
    )


def override(profile: HardwareProfile, settings: Mapping[str, float]) -> HardwareProfile:
    """``profile`` with the numbers in ``settings`` replaced, and its source saying which.

    For numbers the user knows better than the probe (a vendor's bandwidth figure, a
    clock the VM hides). Keys are the field names of :class:`HardwareProfile` other than
    ``source``; values must be positive. Keys overridden earlier stay listed.
    """
    valid = ", ".join(FIELDS)
    values = {}
    for key, value in settings.items():
        if key not in FIELDS:
            raise TargetError(f"unknown hardware profile key {key!r}; valid keys: {valid}")
        if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                or not math.isfinite(value) or value <= 0:
            raise TargetError(f"hardware profile key {key} needs a positive number, got {value!r} "
                              f"(valid keys: {valid})")
        values[key] = float(value)
    if not values:
        return profile
    base, keys = profile.source, []
    match = _OVERRIDDEN.match(base)
    if match:
        base = match["base"]
        keys = [k.strip() for k in match["keys"].split(",") if k.strip()]
    keys += [k for k in values if k not in keys]
    return dataclasses.replace(profile, **values, source=f"{base} (overridden: {', '.join(keys)})")


# -- the stored profiles --------------------------------------------------------------------


def profile_path() -> Path:
    """Where probed profiles live: ``target.json`` under the build cache's root.

    A JSON object keyed by :meth:`CpuTarget.key`, each entry
    ``{"cores": <cores probed>, "profile": {...}}``.
    """
    return BuildCache.default().root / FILE_NAME


def save_profile(target: CpuTarget, profile: HardwareProfile, path: Path | str | None = None) -> Path:
    """Store ``profile`` as the one of ``target``'s ISA, measured on its cores; return the file.

    Other targets' entries in the file are kept. The file is replaced atomically, so a
    concurrent :func:`profile_for` reads the old or the new file, never half of one.
    """
    path = Path(path).expanduser() if path is not None else profile_path()
    data = _read_file(path)
    data[target.key()] = {"cores": target.num_cores, "profile": profile.to_dict()}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".target-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def stored_profile(target: CpuTarget, path: Path | str | None = None) -> tuple[HardwareProfile, int] | None:
    """The profile stored for ``target``'s ISA key as it was measured, with its core count.

    None if the file or the entry is missing; an unreadable entry warns and reads as
    missing, so a damaged file never stops a compile.
    """
    path = Path(path).expanduser() if path is not None else profile_path()
    entry = _read_file(path).get(target.key())
    if entry is None:
        return None
    try:
        if not isinstance(entry, dict):
            raise TargetError(f"the entry is a {type(entry).__name__}, not an object")
        cores = entry.get("cores")
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
            raise TargetError(f"its core count {cores!r} is not a positive integer")
        return HardwareProfile.from_dict(entry.get("profile")), cores
    except TargetError as exc:
        warnings.warn(f"taskloom: ignoring the hardware profile of {target.key()} in {path}: {exc}; "
                      f"run `taskloom target probe` to measure it again", RuntimeWarning, stacklevel=2)
        return None


# (path, file identity, ISA key, cores) -> profile. The file's identity (mtime, size,
# inode; save_profile replaces the file, so a new inode) changes with every save, so a
# stale entry is never hit; clearing when full bounds the memory.
_MEMO: dict[tuple[Any, ...], HardwareProfile] = {}
_MEMO_LIMIT = 1024
# (TASKLOOM_CACHE_DIR, HOME) -> profile_path(): the environment variables that decide it.
_PATHS: dict[tuple[str | None, str | None], Path] = {}


def profile_for(target: CpuTarget) -> HardwareProfile:
    """The profile the performance model should use for ``target``.

    The stored probe of the target's ISA key (:func:`profile_path`), scaled to the
    target's cores with :meth:`HardwareProfile.for_cores`; else :func:`estimate`. Results
    are kept in memory per file version, ISA key and core count, so a call costs one
    ``stat`` of the file: cheap enough for a model that asks per candidate schedule.
    """
    env = (os.environ.get("TASKLOOM_CACHE_DIR"), os.environ.get("HOME"))
    path = _PATHS.get(env)
    if path is None:  # BuildCache.default() costs ~10 us: more than the rest of a hit
        path = _PATHS[env] = profile_path()
    try:
        st = os.stat(path)
        stamp: tuple[int, ...] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        stamp = None
    # the ISA set stands for target.key() (a frozenset caches its hash; key() joins strings)
    memo_key = (path, stamp, target.isa, target.num_cores)
    found = _MEMO.get(memo_key)
    if found is not None:
        return found
    stored = stored_profile(target, path) if stamp is not None else None
    profile = stored[0].for_cores(target.num_cores, stored[1]) if stored else estimate(target)
    if len(_MEMO) >= _MEMO_LIMIT:
        _MEMO.clear()
    _MEMO[memo_key] = profile
    return profile


def _read_file(path: Path) -> dict[str, Any]:
    """The stored profiles as a dict; a missing file is empty, a damaged one warns and is empty."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        warnings.warn(f"taskloom: cannot read the hardware profiles in {path} ({exc}); using "
                      f"estimates", RuntimeWarning, stacklevel=3)
        return {}
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"it holds a {type(data).__name__}, not an object")
    except ValueError as exc:
        warnings.warn(f"taskloom: ignoring the damaged hardware profile file {path} ({exc}); "
                      f"delete it or run `taskloom target probe` to write it again",
                      RuntimeWarning, stacklevel=3)
        return {}
    return data


# -- measuring ------------------------------------------------------------------------------

# The probe library. NACC independent accumulators hide the latency of the FMA and add
# units (4 cycles, 2 per cycle: at least 8 in flight) while leaving registers for the
# operands; the Python side writes out one statement per accumulator so that gcc keeps
# each in a register rather than in an array on the stack. Timing happens in C, inside
# one OpenMP region per measurement, so neither ctypes calls nor thread start-up are timed.
_SOURCE = r"""
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

typedef float vf __attribute__((vector_size(@VBYTES@)));
#define LANES (@VBYTES@ / 4)
#define NACC @NACC@

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float hsum(vf v) {
    float s = 0.0f;
    for (int i = 0; i < LANES; i++) s += v[i];
    return s;
}

typedef float (*work_fn)(const void *ctx, int tid, long n);

/* Run work(ctx, tid, n) on `threads` threads at once. n starts at 1 and grows until one run
   lasts min_s; then the fastest of `repeats` runs is kept (the one that reached min_s counts).
   Returns the best seconds and stores n and the team size. */
static double best_time(work_fn work, const void *ctx, int threads, double min_s, int repeats,
                        long *n_out, int *threads_out, float *sink) {
    long n = 1;
    double best = 1e300;
    int timed = 0, done = 0, team = 1;
    float total = 0.0f;
    #pragma omp parallel num_threads(threads) reduction(+:total)
    {
        int tid = omp_get_thread_num();
        #pragma omp master
        team = omp_get_num_threads();
        for (;;) {
            #pragma omp barrier
            double start = now_s();  /* the master's is the one used */
            total += work(ctx, tid, n);
            #pragma omp barrier
            #pragma omp master
            {
                double elapsed = now_s() - start;
                if (timed == 0 && elapsed < min_s && n < (1L << 40)) {
                    double grow = elapsed > 0 ? 1.25 * min_s / elapsed : 1000.0;
                    grow = grow < 2.0 ? 2.0 : (grow > 1000.0 ? 1000.0 : grow);
                    n = (long)((double)n * grow);
                } else {
                    if (elapsed < best) best = elapsed;
                    if (++timed >= repeats) done = 1;
                }
            }
            #pragma omp barrier
            if (done) break;
        }
    }
    *n_out = n;
    *threads_out = team;
    *sink += total;
    return best;
}

/* FMA throughput: NACC independent chains acc = acc * x + y (x and y come from memory, so
   gcc cannot fold the chain; they keep acc near 0.1, far from denormals and overflow). */
static float fma_work(const void *ctx, int tid, long n) {
    const float *xy = (const float *)ctx;
    vf x = (vf){} + xy[0], y = (vf){} + xy[1];
@FMA_INIT@
    for (long i = 0; i < n; i++) {
@FMA_BODY@
    }
    return hsum(@ACC_SUM@);
}

double taskloom_probe_fma(int threads, double min_s, int repeats, int *threads_used, float *sink) {
    float xy[2] = {0.999f, 1e-4f};
    long n;
    double best = best_time(fma_work, xy, threads, min_s, repeats, &n, threads_used, sink);
    double flops = (double)n * NACC * LANES * 2.0 * (double)*threads_used;
    return flops / best * 1e-9;
}

/* Read bandwidth: each thread sums its own slice of the buffer, n passes over it. */
typedef struct { const float *buf; long per_thread; } read_ctx;

static float read_work(const void *ctx, int tid, long n) {
    const read_ctx *c = (const read_ctx *)ctx;
    const vf *p = (const vf *)(c->buf + (long)tid * c->per_thread);
    long nv = c->per_thread / LANES;
@READ_INIT@
    for (long pass = 0; pass < n; pass++) {
        for (long i = 0; i < nv; i += NACC) {
@READ_BODY@
        }
    }
    return hsum(@ACC_SUM@);
}

/* per_thread floats per thread (a multiple of NACC * LANES). Returns GB/s, or -1 when the
   buffer cannot be allocated. */
double taskloom_probe_read(long per_thread, int threads, double min_s, int repeats,
                           int *threads_used, float *sink) {
    size_t bytes = (size_t)per_thread * (size_t)threads * sizeof(float);
    size_t huge = 2u << 20;
    size_t rounded = (bytes + huge - 1) / huge * huge;
    void *mem = NULL;
    if (posix_memalign(&mem, huge, rounded) != 0) return -1.0;
    /* Large pages, as numpy asks for its large arrays: fewer TLB misses, and the
       hardware prefetchers are not stopped at every 4 KiB boundary. */
    madvise(mem, rounded, MADV_HUGEPAGE);
    float *buf = (float *)mem;
    /* First touch by the thread that will read each slice, so that its pages land on that
       thread's memory node; a nonzero value so that no page stays the shared zero page. */
    #pragma omp parallel num_threads(threads)
    {
        float *mine = buf + (long)omp_get_thread_num() * per_thread;
        for (long i = 0; i < per_thread; i++) mine[i] = 1e-3f;
    }
    read_ctx ctx = {buf, per_thread};
    long n;
    double best = best_time(read_work, &ctx, threads, min_s, repeats, &n, threads_used, sink);
    free(mem);
    return (double)per_thread * sizeof(float) * (double)*threads_used * (double)n / best * 1e-9;
}
"""

_MIB = 1024 ** 2
# The DRAM buffer: well above the L3 so that almost every read misses it, but at least
# 256 MiB (a reported L3 may be small or wrong) and at most 1 GiB. The cap: a VM often
# reports the whole host socket's L3 (hundreds of MiB here), and 4x that would need
# gigabytes of memory and seconds of page faults per measurement on a small machine,
# while 1 GiB already overflows any L3 a single socket really gives one VM.
_MEM_MIN_BYTES, _MEM_MAX_BYTES = 256 * _MIB, 1024 * _MIB


def probe(target: CpuTarget, progress: bool = True, *, quick: bool = False) -> HardwareProfile:
    """Measure ``target``'s profile on this machine now (a few seconds; about 15 at most).

    Builds the probe library for the target (its ISA decides the vector width), then
    times FMA throughput on one core and on ``target.num_cores`` cores, and read
    bandwidth from L1 (half of ``l1d_bytes``), L2 (half of ``l2_bytes``), L3 (all cores,
    4x L2 each, under half the L3) and DRAM (one core, then all). ``progress`` prints a
    line on stderr per step. ``quick`` shortens every measurement and the DRAM buffer to
    its 256 MiB minimum, for tests: the same numbers, just noisier.

    The target must run on this machine with at most the cores this process may use.
    """
    host = CpuTarget.host()
    if not target.runs_on_host(host):
        missing = ", ".join(sorted(target.isa - host.isa))
        raise TargetError(f"cannot probe target {target.key()} on this machine: it lacks {missing}; "
                          f"probe on a machine that has them, or store numbers with "
                          f"`taskloom target probe --no-measure --set KEY=VALUE`")
    if target.num_cores > host.num_cores:
        raise TargetError(f"cannot probe {target.num_cores} cores: this process may use "
                          f"{host.num_cores}; probe with -cores={host.num_cores} or fewer")
    lib = _probe_library(target)
    min_s, repeats = (0.01, 3) if quick else (0.05, 5)
    cores = target.num_cores
    sink = ctypes.c_float(0.0)  # the kernels' sums end here, so none of their work is dead

    def say(what: str) -> None:
        if progress:
            print(f"taskloom: probing {what}...", file=sys.stderr, flush=True)

    def fma(threads: int) -> float:
        used = ctypes.c_int(0)
        rate = lib.taskloom_probe_fma(threads, min_s, repeats, ctypes.byref(used), ctypes.byref(sink))
        return _checked(rate, used.value, threads, "FMA throughput")

    chunk = _accumulators(target) * target.vector_bits // 8  # bytes of one pass of the accumulators

    def read(bytes_per_thread: int, threads: int, what: str) -> float:
        per_thread = max(chunk, bytes_per_thread // chunk * chunk) // 4
        used = ctypes.c_int(0)
        rate = lib.taskloom_probe_read(per_thread, threads, min_s, repeats, ctypes.byref(used),
                                       ctypes.byref(sink))
        if rate < 0:
            raise TargetError(f"cannot allocate {per_thread * threads * 4 // _MIB} MiB to probe {what}")
        return _checked(rate, used.value, threads, what)

    say("FMA throughput on 1 core")
    fma_core = fma(1)
    say(f"FMA throughput on {cores} cores")
    fma_all = fma(cores) if cores > 1 else fma_core
    say(f"L1 bandwidth ({target.l1d_bytes // 2 // 1024} KiB)")
    l1 = read(target.l1d_bytes // 2, 1, "L1 bandwidth")
    say(f"L2 bandwidth ({target.l2_bytes // 2 // 1024} KiB)")
    l2 = read(target.l2_bytes // 2, 1, "L2 bandwidth")
    # Each core reads 4x its L2 so that the L2 holds little of its slice; the whole stays
    # below half the L3 so that it fits there. (Where the L3 is smaller than the cores' L2
    # together, this measures mostly L2: such a machine has no L3 worth modelling apart.)
    l3_total = min(4 * target.l2_bytes * cores, target.l3_bytes // 2)
    say(f"L3 bandwidth on {cores} cores ({l3_total // _MIB} MiB)")
    l3 = read(l3_total // cores, cores, "L3 bandwidth")
    mem_bytes = _mem_bytes(target, quick)
    say(f"DRAM bandwidth on 1 core ({mem_bytes // _MIB} MiB)")
    mem_core = read(mem_bytes, 1, "DRAM bandwidth")
    say(f"DRAM bandwidth on {cores} cores")
    mem_all = read(mem_bytes // cores, cores, "DRAM bandwidth") if cores > 1 else mem_core
    return HardwareProfile(fma_gflops_core=fma_core, fma_gflops_all=fma_all, l1_gbs=l1, l2_gbs=l2,
                           l3_gbs=l3, mem_gbs_core=mem_core, mem_gbs=mem_all,
                           source=f"probed {datetime.date.today().isoformat()}")


def _accumulators(target: CpuTarget) -> int:
    """Accumulators of the probe kernels: 16 with 32 vector registers, 12 with 16."""
    return 16 if target.num_vector_registers >= 32 else 12


def _mem_bytes(target: CpuTarget, quick: bool) -> int:
    """Bytes of the DRAM buffer (see _MEM_MIN_BYTES), and no more than a quarter of the RAM."""
    size = _MEM_MIN_BYTES if quick else min(max(4 * target.l3_bytes, _MEM_MIN_BYTES), _MEM_MAX_BYTES)
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        size = min(size, max(ram // 4, 64 * _MIB))
    except (ValueError, OSError, AttributeError):
        pass
    return size


def _checked(rate: float, used: int, wanted: int, what: str) -> float:
    if used != wanted:
        raise TargetError(f"probing {what}: OpenMP gave {used} threads instead of {wanted}; unset "
                          f"OMP_THREAD_LIMIT / OMP_DYNAMIC or probe with -cores={used}")
    if not math.isfinite(rate) or rate <= 0:
        raise TargetError(f"probing {what} measured {rate!r}; the machine's clock or the probe is broken")
    return rate


def probe_source(target: CpuTarget) -> str:
    """The C source of the probe library for ``target`` (its vector width and registers)."""
    nacc = _accumulators(target)
    accs = [f"a{k}" for k in range(nacc)]
    # Different starting values so that no two chains are provably equal.
    fma_init = "\n".join(f"    vf {a} = (vf){{}} + (0.01f * {k + 1} + 0.001f * tid);" for k, a in enumerate(accs))
    read_init = "\n".join(f"    vf {a} = (vf){{}};" for a in accs)
    return (_SOURCE.replace("@VBYTES@", str(target.vector_bits // 8))
            .replace("@NACC@", str(nacc))
            .replace("@FMA_INIT@", fma_init)
            .replace("@FMA_BODY@", "\n".join(f"        {a} = {a} * x + y;" for a in accs))
            .replace("@READ_INIT@", read_init)
            .replace("@READ_BODY@", "\n".join(f"            {a} += p[i + {k}];" for k, a in enumerate(accs)))
            .replace("@ACC_SUM@", " + ".join(accs)))


def _probe_library(target: CpuTarget) -> ctypes.CDLL:
    """Build (or find in the build cache) and load the probe library for ``target``."""
    from taskloom.backend.compiler import compile_shared_library  # the backend imports target

    # gnu11 contracts a * x + y into one FMA already; say so, in case CFLAGS differ.
    path = compile_shared_library(probe_source(target), target, name="probe",
                                  extra_flags=["-ffp-contract=fast"])
    lib = ctypes.CDLL(str(path))
    out = [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_float)]
    lib.taskloom_probe_fma.argtypes = [ctypes.c_int, ctypes.c_double, ctypes.c_int, *out]
    lib.taskloom_probe_fma.restype = ctypes.c_double
    lib.taskloom_probe_read.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_double, ctypes.c_int, *out]
    lib.taskloom_probe_read.restype = ctypes.c_double
    return lib
