import re
src = open("v0.c").read()
pack_b = "      // pack B's KC x NC block into NR-wide panels; columns past N are zeros\n      for (int32_t jr = 0; jr < 8; ++jr) {"
assert src.count(pack_b) == 1
pack_a = "        // pack A's MC x KC block by vectors along K; rows past M repeat row M-1 (never stored)\n        for (int32_t i"
assert src.count(pack_a) == 1
glob = "int tl_skip = 0;\nvoid set_skip(int s) { tl_skip = s; }\n"
head = src.index("void matmul(")
def put(s, name): open(name, "w").write(s[:head] + glob + s[head:])
put(src, "v0.c2")
put(src.replace(pack_b, pack_b.replace("for (int32_t jr = 0; jr < 8; ++jr) {", "for (int32_t jr = 0; jr < (tl_skip ? 0 : 8); ++jr) {")), "v1_nopackb.c")
put(src.replace(pack_a, pack_a.replace("for (int32_t i", "if (!tl_skip) for (int32_t i")), "v3_nopacka.c")
put(src.replace("if (0 < kb) {", "if (0 < kb && !tl_skip) {"), "v4_nocbload.c")
# shared B packing, double-buffered by K block parity
s = src.replace("  #pragma omp parallel for schedule(static)\n  for (int32_t w = 0; w < 2; ++w) {",
                "  #pragma omp parallel num_threads(2)\n  { const int32_t w = omp_get_thread_num();")
s = s.replace("    float* Bp = (float*)tl_scratch_take(tl_round_up((size_t)(65536) * sizeof(float), 64));  // too large for the stack: the thread's scratch\n", "")
s = s.replace("  tl_scratch_give(Bp);\n", "")
s = s.replace("tl_scratch_give(Bp);", "")
s = s.replace(pack_b, "      float* Bp = Bsh[kb & 1];\n" + pack_b.replace("for (int32_t jr = 0; jr < 8; ++jr) {", "for (int32_t jr = w * 4; jr < w * 4 + 4; ++jr) {"))
# barrier after the pack loop: insert before the mb loop
s = s.replace("      for (int32_t mb = 0;", "      #pragma omp barrier\n      for (int32_t mb = 0;", 1)
s = s.replace("void matmul(", "static float Bsh[2][65536] __attribute__((aligned(64)));\nvoid matmul(")
put(s, "v2_shared.c")
swap_old = pack_b + "\n        for (int32_t k = 0; k < 128; ++k) {"
assert src.count(swap_old) == 1
swap_new = "      // pack B's KC x NC block into NR-wide panels; columns past N are zeros\n      for (int32_t k = 0; k < 128; ++k) {\n        for (int32_t jr = 0; jr < 8; ++jr) {"
put(src.replace(swap_old, swap_new), "v5_kouter.c")
# v6: while computing K block kb, ask L2 for the next block's rows of B and of this core's A
lines = src.split("\n")
i = next(j for j, l in enumerate(lines) if "for (int32_t k = 0; k < 128; ++k) {" in l and j > 480)
assert "acc[24]" in "\n".join(lines[i-10:i])
ind = lines[i][:lines[i].index("for")]
pf = [ind + "  if (kb < 3 && k % 7 == 0) {",
      ind + "    const int32_t l = (jr * 43 + ir) * 18 + k / 7;",
      ind + "    if (l < 4096) __builtin_prefetch(&B[(k0 + 128 + l / 32) * 512 + (l % 32) * 16], 0, 2);",
      ind + "    else if (l < 4096 + 2064) __builtin_prefetch(&A[tl_min_i32(m_lo + (l - 4096) / 8, 511) * 512 + k0 + 128 + ((l - 4096) % 8) * 16], 0, 2);",
      ind + "  }"]
lines[i+1:i+1] = pf
s6 = "\n".join(lines)
put(s6, "v6_pfnext.c")
put(s6.replace(swap_old, swap_new), "v7_pfnext_kouter.c")
