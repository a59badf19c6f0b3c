import pytest

from taskloom.errors import TargetError
from taskloom.target import KNOWN_FLAGS, CpuTarget, get_target, host_target

HOST = CpuTarget.host()
needs_avx512 = pytest.mark.skipif(not HOST.has("avx512f"), reason="host lacks AVX-512")
AVX512_HOST = CpuTarget("avx512 box", 8, {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw",
                                          "avx512vl", "avx512dq", "avx512_vnni"})
SSE_HOST = CpuTarget("old box", 2, {"sse4_2"})


def test_host_reads_sane_values():
    host = host_target()
    assert host is CpuTarget.host()  # cached per process
    assert host.name and 1 <= host.num_cores <= 4096
    assert host.isa <= set(KNOWN_FLAGS)
    assert 4 * 1024 <= host.l1d_bytes <= host.l2_bytes <= host.l3_bytes
    assert host.vector_bits in (128, 256, 512)
    assert host.runs_on_host()
    assert host.cflags() == ["-march=native"]


def test_from_string_combinations():
    assert get_target(None) == get_target("cpu") == HOST
    one = get_target("cpu -cores=1")
    assert one.num_cores == 1 and one.isa == HOST.isa
    avx2 = get_target("cpu -isa=avx2 -cores=1")
    assert avx2.num_cores == 1 and avx2.isa == {"sse4_2", "avx", "avx2", "fma"}
    assert get_target("cpu -cores=3 -isa=avx2") == avx2.with_cores(3)
    avx512 = get_target("cpu -isa=avx512")
    assert avx512.has("avx512f") and avx512.vector_bits == 512 and avx512.num_vector_registers == 32
    assert get_target(avx2) is avx2


def test_with_isa_avx2_drops_avx512_and_disables_it():
    avx2 = AVX512_HOST.with_isa("avx2")
    assert not any(flag.startswith("avx512") for flag in avx2.isa)
    assert avx2.runs_on_host(AVX512_HOST)
    flags = avx2.cflags(host=AVX512_HOST)
    assert flags[0] == "-march=native" and "-mno-avx512f" in flags
    assert avx2.vector_bits == 256 and avx2.num_vector_registers == 16


@needs_avx512
def test_avx2_on_this_avx512_host_disables_avx512f():
    assert "-mno-avx512f" in get_target("cpu -isa=avx2").cflags()


def test_avx512_keeps_extensions_and_cross_builds():
    assert AVX512_HOST.with_isa("avx512") == AVX512_HOST
    cross = SSE_HOST.with_isa("avx512")
    assert not cross.runs_on_host(SSE_HOST)
    flags = cross.cflags(host=SSE_HOST)
    assert "-march=native" not in flags
    assert {"-mavx2", "-mfma", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq"} <= set(flags)


@pytest.mark.parametrize("spec, word", [
    ("cpu -threads=4", "-threads=4"), ("cpu -isa=avx9", "avx9"), ("gpu", "gpu"),
    ("cpu -cores=zero", "zero"), ("cpu -cores=0", "0"), ("cpu -isa", "-isa"),
])
def test_bad_specs_name_the_culprit(spec, word):
    with pytest.raises(TargetError, match=word) as info:
        CpuTarget.from_string(spec)
    assert "-isa" in str(info.value) or "cores" in str(info.value) or "avx512" in str(info.value)


def test_unknown_isa_level_lists_valid_ones():
    with pytest.raises(TargetError, match="avx9.*sse4_2, avx2, avx512"):
        HOST.with_isa("avx9")
    with pytest.raises(TargetError, match="avx512_foo"):
        CpuTarget("x", 1, {"avx512_foo"})
    with pytest.raises(TargetError, match="avx512"):
        HOST.has("avx512")


def test_vector_lanes():
    class Dtype:
        nbytes = 2

    assert AVX512_HOST.vector_lanes(4) == 16 and AVX512_HOST.vector_lanes(Dtype()) == 32
    avx2 = AVX512_HOST.with_isa("avx2")
    assert avx2.vector_lanes(4) == 8 and avx2.vector_lanes(8) == 4
    assert SSE_HOST.vector_lanes(1) == 16
    for bad in (3, 0, "float32"):
        with pytest.raises(TargetError):
            avx2.vector_lanes(bad)


def test_dict_round_trip_and_key():
    for target in (HOST, AVX512_HOST.with_isa("avx2").with_cores(1), SSE_HOST):
        data = target.to_dict()
        assert CpuTarget.from_dict(data) == target
        assert CpuTarget.from_dict(data).key() == target.key()
    assert AVX512_HOST.with_isa("avx2").key() == "x86_64-sse4_2-avx-avx2-fma"
    assert AVX512_HOST.key() != AVX512_HOST.with_isa("avx2").key()
    with pytest.raises(TargetError, match="num_cores"):
        CpuTarget.from_dict({"kind": "cpu", "name": "x", "isa": []})


def test_weights_stream_past_the_cores_l2_caches():
    host = CpuTarget.host()
    between = host.num_cores * host.l2_bytes
    assert not host.streams_weights(between) and host.streams_weights(between + 1)
    assert host.nhwc_channel_multiple() == 16
