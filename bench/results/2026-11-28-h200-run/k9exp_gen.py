"""How the run-2 program of 2026-11-28-h200-run.md was made: the k9_matmul_fused3 kernel and
its launcher cut from a BERT-base (1 layer) build for the H200 (/tmp/bert1.cu, its source.cu),
renamed and edited into eight variants, with a main() that checks each against a float64
host reference 20 times. Built with: nvcc -O3 -gencode arch=compute_90a,code=sm_90a -std=c++17
-o k9exp k9exp.cu. A record of the experiment, not part of taskloom."""
import re
src = open("/tmp/bert1.cu").read().split("\n")
head = "\n".join(src[:1154])          # prelude and the kernels before k9 (unused, harmless)
block = "\n".join(src[1157:1289])     # k9's kernel and launcher (#if ... #endif pairs)
def variant(name, steps=48, edits=()):
    b = block.replace("k9_matmul_fused3", name)
    if steps != 48:
        kk = steps * 64
        b = b.replace("k < 48", f"k < {steps}")
        b = b.replace("{3072ull, 128ull}", f"{{{kk}ull, 128ull}}").replace("{768ull, 3072ull}", f"{{768ull, {kk}ull}}")
    for old, new in edits:
        assert old in b, (name, old)
        b = b.replace(old, new)
    return b
ARRIVE = "      if (0 < k && tid % 128 == 0) {"
V = [
 ("v0_as_built", 48, ()),
 ("v1_consumers_sync_before_release", 48, [(ARRIVE, '      asm volatile("bar.sync 1, 128;\\n" ::: "memory");\n' + ARRIVE)]),
 ("v2_wait_all_before_release", 48, [('"n"(1) : "memory");\n      tl_fence_operands<32>(acc);\n      if (0 < k', '"n"(0) : "memory");\n      tl_fence_operands<32>(acc);\n      if (0 < k')]),
 ("v3_no_setmaxnreg", 48, [('asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\\n");', ''), ('asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\\n");', '')]),
 ("v4_12_steps", 12, ()),
 ("v5_16_steps", 16, ()),
 ("v6_launch_bounds_1", 48, [("__launch_bounds__(256)", "__launch_bounds__(256, 1)")]),
 ("v7_four_stages", 48, [("k % 5", "k % 4"), ("k / 5", "k / 4"), ("(k + 4) % 5", "(k + 3) % 4")]),
]
body = [head] + [variant(n, s, e) for n, s, e in V]
names = [n for n, _, _ in V]
steps = [s for _, s, _ in V]
main = r'''
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cmath>
typedef int (*launch_fn)(const __half*, const __half*, const __half*, __half*, void*);
int main(int argc, char** argv) {
  const int runs = argc > 1 ? atoi(argv[1]) : 20, only = argc > 2 ? atoi(argv[2]) : -1;
  const int M = 128, N = 768, K = 3072;
  std::vector<__half> A(M * K), B(K * N), R(M * N);
  srand(1);
  auto rnd = [] { return (float)rand() / RAND_MAX * 2.0f - 1.0f; };
  std::vector<float> Af(M * K), Bf(K * N), Rf(M * N);
  for (int i = 0; i < M * K; ++i) { A[i] = __float2half(rnd()); Af[i] = __half2float(A[i]); }
  for (int i = 0; i < K * N; ++i) { B[i] = __float2half(rnd() * 0.05f); Bf[i] = __half2float(B[i]); }
  for (int i = 0; i < M * N; ++i) { R[i] = __float2half(rnd()); Rf[i] = __half2float(R[i]); }
  __half *a, *b, *r, *o;
  cudaMalloc(&a, M * K * 2); cudaMalloc(&b, K * N * 2); cudaMalloc(&r, M * N * 2); cudaMalloc(&o, M * N * 2);
  cudaMemcpy(a, A.data(), M * K * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(b, B.data(), K * N * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(r, R.data(), M * N * 2, cudaMemcpyHostToDevice);
  launch_fn fns[] = {FNS};
  const char* names[] = {NAMES};
  int steps[] = {STEPS};
  for (int v = 0; v < (int)(sizeof(fns) / sizeof(fns[0])); ++v) {
    if (only >= 0 && v != only) continue;
    int kk = steps[v] * 64;
    std::vector<double> ref(M * N);
    double refmax = 0;
    for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) {
      double s = 0; for (int k = 0; k < kk; ++k) s += (double)Af[i * K + k] * Bf[k * N + j];
      ref[i * N + j] = (double)__half2float(__float2half((float)s)) + Rf[i * N + j];
      refmax = fmax(refmax, fabs(ref[i * N + j]));
    }
    std::vector<__half> first(M * N), got(M * N);
    double worst = 0; long wrong_max = 0, unstable_max = 0;
    for (int run = 0; run < runs; ++run) {
      cudaMemset(o, 0xFF, M * N * 2);
      int e = fns[v](a, b, r, o, 0);
      cudaError_t s = cudaDeviceSynchronize();
      if (e || s) { printf("%-36s launch %d sync %d (%s)\n", names[v], e, (int)s, cudaGetErrorString(s)); return 1; }
      cudaMemcpy(got.data(), o, M * N * 2, cudaMemcpyDeviceToHost);
      if (run == 0) first = got;
      long wrong = 0, unstable = 0;
      for (int i = 0; i < M * N; ++i) {
        double d = fabs(__half2float(got[i]) - ref[i]);
        if (!(d <= 0.02 * refmax)) ++wrong;
        worst = fmax(worst, d != d ? 1e9 : d);
        if (*(unsigned short*)&got[i] != *(unsigned short*)&first[i]) ++unstable;
      }
      wrong_max = wrong > wrong_max ? wrong : wrong_max;
      unstable_max = unstable > unstable_max ? unstable : unstable_max;
    }
    printf("%-36s steps %2d  worst |diff|/max %.3g  most wrong elements in a run %6ld  most differing from run 0 %6ld\n",
           names[v], steps[v], worst / refmax, wrong_max, unstable_max);
  }
  return 0;
}
'''
main = main.replace("FNS", ", ".join(f"launch_{n}" for n in names)).replace("NAMES", ", ".join(f'"{n}"' for n in names)).replace("STEPS", ", ".join(map(str, steps)))
open("k9exp.cu", "w").write("\n".join(body) + main)
