"""Writes v0.c, the generated 512³ kernel that variants_a.py and variants_b.py edit:
the template's source for MatmulConfig(6, 4, 144, 906, 1024, 2, 1) on a 2-core AVX-512 target.
Run from a checkout of taskloom: `python make_v0.py` writes ./v0.c (or the path given)."""
import sys
from taskloom import transforms
from taskloom.backend.codegen_x86 import codegen_x86 as codegen_c
from taskloom.ir import stmt as S
from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program
from taskloom.target.cpu import CpuTarget

target = CpuTarget.from_string("cpu -isa=avx512 -cores=2")
fn = matmul_program((1, 512, 512, 512), MatmulConfig(6, 4, 144, 906, 1024, 2, 1), target)
open(sys.argv[1] if len(sys.argv) > 1 else "v0.c", "w").write(codegen_c(S.Module((transforms.lower(fn),)), target))
