#include <immintrin.h>
#include <stdio.h>
#include <x86intrin.h>
static float Ap[258*128] __attribute__((aligned(64)));
static float Bp[8*128*64] __attribute__((aligned(64)));
static float Cb[43*8*384] __attribute__((aligned(64)));
__attribute__((noinline)) void run(int KC, int cb) {
  for (int jr = 0; jr < 8; ++jr) for (int ir = 0; ir < 43; ++ir) {
    __m512 acc[24];
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_setzero_ps();
    for (int k = 0; k < KC; ++k) {
      __m512 bv[4];
      for (int v = 0; v < 4; ++v) bv[v] = _mm512_loadu_ps(&Bp[jr*8192 + k*64 + v*16]);
      for (int i = 0; i < 6; ++i) { __m512 a = _mm512_set1_ps(Ap[ir*768 + i*128 + k]);
        for (int v = 0; v < 4; ++v) acc[i*4+v] = _mm512_fmadd_ps(a, bv[v], acc[i*4+v]); }
    }
    int tile = jr*43 + ir;
    for (int i = 0; i < 24; ++i) { if (cb) acc[i] = _mm512_add_ps(acc[i], _mm512_loadu_ps(&Cb[tile*384 + i*16])); _mm512_storeu_ps(&Cb[tile*384 + i*16], acc[i]); }
  }
}
int main() {
  for (int cb = 0; cb < 2; ++cb) {
  unsigned long long best = ~0ull;
  for (int r = 0; r < 200; ++r) { unsigned long long t = __rdtsc(); run(128, cb); t = __rdtsc() - t; if (t < best) best = t; }
  double fl = 2.0*258*512*128;
  printf("cb=%d one K block of 258x512x128: %llu tsc cycles, %.1f us, %.1f GFLOP/s, %.2f cyc/k-step\n", cb, best, best/2600.0, fl/(best/2.6e9)/1e9, best/(8*43*128.0));
  }
}
