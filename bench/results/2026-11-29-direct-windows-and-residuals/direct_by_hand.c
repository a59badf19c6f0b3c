#include <immintrin.h>
#include <stdint.h>
#include <omp.h>
// 3x3 stride-1 conv, NHWC, input pre-padded (N, 58, 58, 64), B = HWIO weights (576 x 64), out (N*56*56, 64)
// TAPS taps per K block (KC = TAPS * 64); MC rows per block.
#define H 56
#define W 56
#define HP 58
#define WP 58
#define C 64
#define MR 6
#ifndef TAPS
#define TAPS 3
#endif
#define MC 450
void direct(const float* restrict xp, const float* restrict bias, const float* restrict B, float* restrict out, int N) {
  const int M = N * H * W;
  const int KB = 9 / TAPS;
  #pragma omp parallel num_threads(2)
  {
    int w = omp_get_thread_num();
    int band = (M + 1) / 2; band = (band + MR - 1) / MR * MR;
    int m_lo = w * band, m_hi = m_lo + band < M ? m_lo + band : M;
    static __thread float Cb[(MC / MR + 1) * MR * 64] __attribute__((aligned(64)));
    for (int m0 = m_lo; m0 < m_hi; m0 += MC) {
      int mm = m_hi - m0 < MC ? m_hi - m0 : MC;
      for (int kb = 0; kb < KB; ++kb) {
        for (int ir = 0; ir < (mm + MR - 1) / MR; ++ir) {
          int rowoff[MR];
          for (int i = 0; i < MR; ++i) {
            int m = m0 + ir * MR + i; if (m > M - 1) m = M - 1;
            int n = m / (H * W), oh = m / W % H, ow = m % W;
            rowoff[i] = ((n * HP + oh) * WP + ow) * C;
          }
          __m512 acc[MR][4];
          for (int i = 0; i < MR; ++i) for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
          for (int t = 0; t < TAPS; ++t) {
            int tap = kb * TAPS + t, kh = tap / 3, kw = tap % 3;
            int off = (kh * WP + kw) * C;
            const float* bp = B + (size_t)tap * C * 64;
            for (int c = 0; c < C; ++c) {
              __m512 b0 = _mm512_loadu_ps(bp + c * 64), b1 = _mm512_loadu_ps(bp + c * 64 + 16);
              __m512 b2 = _mm512_loadu_ps(bp + c * 64 + 32), b3 = _mm512_loadu_ps(bp + c * 64 + 48);
              #pragma GCC unroll 6
              for (int i = 0; i < MR; ++i) {
                __m512 a = _mm512_set1_ps(xp[rowoff[i] + off + c]);
                acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]); acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
                acc[i][2] = _mm512_fmadd_ps(a, b2, acc[i][2]); acc[i][3] = _mm512_fmadd_ps(a, b3, acc[i][3]);
              }
            }
          }
          float* cb = Cb + ir * MR * 64;
          for (int i = 0; i < MR; ++i) {
            int m = m0 + ir * MR + i;
            for (int v = 0; v < 4; ++v) {
              __m512 s = acc[i][v];
              if (kb > 0) s = _mm512_add_ps(s, _mm512_load_ps(cb + i * 64 + v * 16));
              if (kb == KB - 1) { if (m < m_hi) _mm512_storeu_ps(out + (size_t)m * 64 + v * 16, _mm512_max_ps(_mm512_add_ps(s, _mm512_loadu_ps(bias + v * 16)), _mm512_setzero_ps())); }
              else _mm512_store_ps(cb + i * 64 + v * 16, s);
            }
          }
        }
      }
    }
  }
}
