#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>
#include <string.h>
static float B[512*512] __attribute__((aligned(64)));
static float Bp[65536] __attribute__((aligned(64)));
static float junk[8<<20] __attribute__((aligned(64)));
void pack(int k0, int kouter) {
  if (!kouter) {
  for (int jr = 0; jr < 8; ++jr) for (int k = 0; k < 128; ++k) for (int v = 0; v < 4; ++v)
    _mm512_storeu_ps(&Bp[jr*8192 + k*64 + v*16], _mm512_loadu_ps(&B[(k0+k)*512 + jr*64 + v*16]));
  } else {
  for (int k = 0; k < 128; ++k) for (int jr = 0; jr < 8; ++jr) for (int v = 0; v < 4; ++v)
    _mm512_storeu_ps(&Bp[jr*8192 + k*64 + v*16], _mm512_loadu_ps(&B[(k0+k)*512 + jr*64 + v*16]));
  }
}
int main() {
  for (int i = 0; i < 512*512; ++i) B[i] = i;
  for (int ko = 0; ko < 2; ++ko) for (int cold = 0; cold < 3; ++cold) {
    unsigned long long best = ~0ull, tot = 0;
    for (int rep = 0; rep < 50; ++rep) {
      if (cold == 1) for (int i = 0; i < 512*512; i += 16) _mm_clflush(&B[i]);
      if (cold == 2) { for (size_t i = 0; i < (8<<20); i += 16) junk[i] += 1; } /* evict to L3 */
      _mm_mfence();
      unsigned long long t = __rdtsc();
      for (int kb = 0; kb < 4; ++kb) pack(kb*128, ko);
      t = __rdtsc() - t;
      if (t < best) best = t; tot += t;
    }
    printf("kouter=%d %s: best %llu cycles (%.1f us at 2.6GHz), mean %llu\n", ko, cold==0?"hot":cold==1?"flushed":"evicted", best, best/2600.0, tot/50);
  }
}
