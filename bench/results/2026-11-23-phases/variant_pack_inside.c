#include <immintrin.h>
#include <stdint.h>
#include <omp.h>
#include <stdlib.h>
static inline int32_t mn(int32_t a, int32_t b) { return a < b ? a : b; }
/* 512^3, 2x1 cores, 6x4 tile, K in 4 blocks of 128; the next K block's B and A packed inside
   the micro-kernel calls of this one (every SLOT k steps one vector copy). Built with -DPFD=n
   (and -DPFL=locality, default 2), each copy also prefetches the source of the copy n slots
   ahead (timed with n = 48, locality 2 and 3, and n = 160, locality 2). */
#ifndef SLOT
#define SLOT 7
#endif
#define SLOTS ((128 + SLOT - 1) / SLOT)
static float BpS[2][2][8*128*64] __attribute__((aligned(64)));
static float ApS[2][2][258*128] __attribute__((aligned(64)));
static float CbS[2][43*8*384] __attribute__((aligned(64)));
#ifdef PFD
#ifndef PFL
#define PFL 2
#endif
static inline const float* slot_src(int s, const float* A, const float* B, int k0n, int m_lo) {
  if (s < 4096) return &B[(k0n + (s >> 5))*512 + ((s >> 2) & 7)*64 + (s & 3)*16];
  s -= 4096; return &A[mn(m_lo + (s >> 3), 511)*512 + k0n + (s & 7)*16];
}
#endif
static inline void copy_slot(int s, const float* A, const float* B, float* Bn, float* An, int k0n, int m_lo) {
  if (s < 4096) {
    int kk = s >> 5, jr = (s >> 2) & 7, v = s & 3;
    _mm512_store_ps(&Bn[jr*8192 + kk*64 + v*16], _mm512_loadu_ps(&B[(k0n + kk)*512 + jr*64 + v*16]));
  } else if (s < 4096 + 2064) {
    s -= 4096;
    int i = s >> 3, kv = s & 7;
    _mm512_store_ps(&An[i*128 + kv*16], _mm512_loadu_ps(&A[mn(m_lo + i, 511)*512 + k0n + kv*16]));
  }
}
void matmul(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C) {
  #pragma omp parallel num_threads(2)
  {
    const int w = omp_get_thread_num();
    const int m_lo = w * 258, m_hi = mn(m_lo + 258, 512);
    float* Cb = CbS[w];
    for (int s = 0; s < 4096 + 2064; ++s) copy_slot(s, A, B, BpS[w][0], ApS[w][0], 0, m_lo);
    for (int kb = 0; kb < 4; ++kb) {
      const float* Bp = BpS[w][kb & 1]; const float* Ap = ApS[w][kb & 1];
      float* Bn = BpS[w][(kb & 1) ^ 1]; float* An = ApS[w][(kb & 1) ^ 1];
      const int k0n = (kb + 1) * 128, ahead = kb < 3;
      for (int jr = 0; jr < 8; ++jr) for (int ir = 0; ir < 43; ++ir) {
        const int tile = jr*43 + ir, rows = mn(6, m_hi - m_lo - ir*6);
        __m512 acc[24];
        for (int i = 0; i < 24; ++i) acc[i] = _mm512_setzero_ps();
        for (int k = 0; k < 128; ++k) {
          if (ahead && k % SLOT == 0) {
            const int sl = tile * SLOTS + k / SLOT;
#ifdef PFD
            if (sl + PFD < 4096 + 2064) __builtin_prefetch(slot_src(sl + PFD, A, B, k0n, m_lo), 0, PFL);
#endif
            copy_slot(sl, A, B, Bn, An, k0n, m_lo);
          }
          __m512 bv[4];
          for (int v = 0; v < 4; ++v) bv[v] = _mm512_load_ps(&Bp[jr*8192 + k*64 + v*16]);
          for (int i = 0; i < 6; ++i) { __m512 a = _mm512_set1_ps(Ap[ir*768 + i*128 + k]);
            for (int v = 0; v < 4; ++v) acc[i*4+v] = _mm512_fmadd_ps(a, bv[v], acc[i*4+v]); }
        }
        for (int i = 0; i < 6; ++i) for (int v = 0; v < 4; ++v) {
          __m512 x = acc[i*4+v];
          if (kb > 0) x = _mm512_add_ps(x, _mm512_load_ps(&Cb[tile*384 + i*64 + v*16]));
          if (kb == 3) { if (i < rows) _mm512_storeu_ps(&C[(m_lo + ir*6 + i)*512 + jr*64 + v*16], x); }
          else _mm512_store_ps(&Cb[tile*384 + i*64 + v*16], x);
        }
      }
    }
  }
}
