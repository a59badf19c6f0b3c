"""``bench/matmul_phases.py``: the instrumented kernel still computes the product, and each
phase the template names gets its own column with time in it."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from taskloom.target.cpu import CpuTarget

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "matmul_phases.py"
#: A tile of 6 rows by as many vectors as the host's registers allow: 6 x 4 with AVX-512's 32
#: registers, 6 x 2 with AVX2's 16.
NV = 4 if CpuTarget.host().num_vector_registers >= 32 else 2


@pytest.fixture(scope="module")
def phases():
    spec = importlib.util.spec_from_file_location("matmul_phases", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table(phases, capsys, shape: str, config: str) -> list[list[str]]:
    # main checks the instrumented kernel's product against numpy before it times anything
    assert phases.main([shape, config, "--calls", "3", "--rounds", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


@pytest.mark.parametrize("shape, config, cores, blocks", [
    ("70,300,300", f"6,{NV},144,906,1024,2,1", 2, 3),   # two cores, K in three blocks
    ("61,300,40", f"6,{NV},144,906,1024,1,1", 1, 0),    # one core, one K block: pack A follows pack B directly
])
def test_every_phase_and_block_has_its_column(phases, capsys, shape, config, cores, blocks):
    head, _, *rows = table(phases, capsys, shape, config)
    assert head == ["core", "pack B", "pack A", *(f"K block {j}" for j in range(blocks)), "all"]
    assert len(rows) == cores
    for row in rows:
        us = [float(x) for x in row[1:]]
        assert us[0] > 0 and us[1] > 0  # both operands are packed (five column panels: A is not read in place)
        assert all(u < us[-1] for u in us[:-1])  # each phase is within the call


def test_instrumented_source_keeps_braces_balanced(phases):
    from taskloom.backend.codegen_x86 import codegen_x86
    from taskloom.ir import stmt as S
    from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program
    from taskloom import transforms
    target = CpuTarget.host()
    fn = matmul_program((1, 61, 300, 40), MatmulConfig(6, NV, 144, 906, 1024, 1, 1), target)
    src = codegen_x86(S.Module((transforms.lower(fn),)), target)
    out = phases.instrument(src, fn.name)
    assert out.count("{") - out.count("}") == src.count("{") - src.count("}")
    assert out.count("tl_t_ph = __rdtsc()") == 2 and out.count("- tl_t_ph;") == 2
