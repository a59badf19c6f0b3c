import sys
src = open("v0.c").read()
head = src.index("void matmul(")
glob = "#include <x86intrin.h>\n"
lines = src.split("\n")
i = next(j for j, l in enumerate(lines) if "for (int32_t k = 0; k < 128; ++k) {" in l and j > 480)
assert "acc[24]" in "\n".join(lines[i-10:i])
ind = lines[i][:lines[i].index("for")]
def variant(step, c_hint, cb_hint):
    L = list(lines)
    pf = [ind + f"  if (k % {step} == 0 && k / {step} < 24) {{",
          ind + f"    const int32_t j = k / {step};",
          ind + f"    if (kb == 3) {{ if ({int(c_hint)}) __builtin_prefetch(&C[tl_min_i32(m0 + ir * 6 + j / 4, 511) * 512 + jr * 64 + (j % 4) * 16], 1, 3); }}",
          ind + f"    else if (kb > 0 && {int(cb_hint)}) __builtin_prefetch(&Cb[tile * 384 + j * 16], 0, 3);",
          ind + "  }"]
    L[i+1:i+1] = pf
    return "\n".join(L)
for name, args in {"v10_c_cb": (5, 1, 1), "v10_c": (5, 1, 0), "v10_cb": (5, 0, 1)}.items():
    open(name + ".c", "w").write(variant(*args))
