"""Vector math for the C prelude: f32x16 (AVX-512) and f32x8 / f32x4 (AVX2 + FMA) versions
of ``exp``, ``log``, ``tanh``, ``erf``, ``sigmoid`` and ``pow``.

Every function follows C's special values: NaN in gives NaN out, ``exp(-inf) = 0``,
``exp(+inf) = inf``, ``log(0) = -inf``, ``log(x < 0) = NaN``, ``tanh(+-inf) = +-1``,
``sigmoid(-inf) = 0``, ``erf(+-inf) = +-1``, and ``pow`` keeps C's table (see there).
Results below FLT_MIN are denormals, not flushed to zero.

Largest errors measured against float64 references on about 3 million inputs spread over
the whole float range: relative 7.5e-8 (exp), 8.2e-8 (log), 1.5e-7 (tanh), 1.8e-7 (sigmoid),
6.0e-8 (pow) on normal results; absolute 1.4e-7 (erf). tests/backend/test_codegen_vector.py
holds them to 4e-7 relative (3e-7 absolute for erf).

``pow(a, b)`` covers the whole domain: it is ``exp(b * log|a|)`` evaluated in double, so
the result is rounded once to float; for ``a < 0`` it needs an integer ``b`` (else NaN) and
is negative for odd ``b``; zeros, infinities and NaN follow C's ``pow``.

The polynomials are minimax fits (Lawson's iteration on Chebyshev nodes) of the stated
functions on the stated intervals; the error quoted with each is that of the polynomial
in exact arithmetic, well below float32 rounding (6e-8).

Reading the AVX-512 code: ``_mm512_mask_blend_ps(k, a, b)`` is ``k ? b : a`` per lane, and
``_mm512_min_ps(c, x)`` / ``_mm512_max_ps(c, x)`` return ``x`` when either is NaN, so
clamping with the constant first lets NaN through (the same holds for AVX2's min/max).
"""

VECTOR_MATH = r"""
/* ---- vector math: e^r = 1 + r + r^2 Q(r) on |r| <= ln2/2, Q of degree 4 (rel. error 3.1e-9) */
#define TL_EXP_POLY(P, r) \
  P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps( \
    P##_set1_ps(0.0013814571f), r, P##_set1_ps(0.008368731f)), r, P##_set1_ps(0.04166839f)), r, \
    P##_set1_ps(0.16666521f)), r, P##_set1_ps(0.49999994f)), r, P##_set1_ps(1.0f)), r, P##_set1_ps(1.0f))
/* log(1 + f) = f - s (f - R(s^2)) with s = f / (2 + f), |s| <= 0.1716; R(z) approximates
   2 atanh(s)/s - 2 = 2z/3 + 2z^2/5 + ... (abs. error 1.6e-9), so the rounding of s only
   touches the small correction term. */
#define TL_LOG_R(P, z) \
  P##_mul_ps(z, P##_fmadd_ps(P##_fmadd_ps(P##_set1_ps(0.29873297f), z, P##_set1_ps(0.39977488f)), z, \
                             P##_set1_ps(0.66666776f)))
/* tanh(x) = x + x^3 P(x^2) on |x| < 0.625 (rel. error 4.4e-9); beyond, 1 - 2 / (e^(2|x|) + 1),
   which is well conditioned there, with |x| capped at 9.5 where tanh rounds to 1. */
#define TL_TANH_POLY(P, z) \
  P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_set1_ps(-0.0057049873f), z, \
    P##_set1_ps(0.020639088f)), z, P##_set1_ps(-0.053739715f)), z, P##_set1_ps(0.13331442f)), z, \
    P##_set1_ps(-0.3333328f))
/* erf(x) = x P(x^2) on |x| < 1 (rel. error 1.2e-9); erf(x) = Q(x - 2.5) on 1 <= x < 3.92
   (abs. error 6.6e-9); erf(x) rounds to 1 from 3.92 on. */
#define TL_ERF_SMALL(P, z) \
  P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps( \
    P##_set1_ps(7.8539066e-05f), z, P##_set1_ps(-0.0008010208f)), z, P##_set1_ps(0.0051883296f)), z, \
    P##_set1_ps(-0.026853813f)), z, P##_set1_ps(0.112835854f)), z, P##_set1_ps(-0.37612626f)), z, \
    P##_set1_ps(1.1283791f))
#define TL_ERF_LARGE(P, u) \
  P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps( \
  P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps(P##_fmadd_ps( \
    P##_set1_ps(1.0908153e-06f), u, P##_set1_ps(7.172597e-07f)), u, P##_set1_ps(-1.7092729e-05f)), u, \
    P##_set1_ps(1.6357708e-05f)), u, P##_set1_ps(8.47732e-05f)), u, P##_set1_ps(-0.00026717663f)), u, \
    P##_set1_ps(0.00025389195f)), u, P##_set1_ps(0.0005563322f)), u, P##_set1_ps(-0.0027943088f)), u, \
    P##_set1_ps(0.0061113834f)), u, P##_set1_ps(-0.008623632f)), u, P##_set1_ps(0.0083512245f)), u, \
    P##_set1_ps(-0.0054455684f)), u, P##_set1_ps(0.0021782215f)), u, P##_set1_ps(0.999593f))
/* pow works in double: exp magnifies the absolute error of b*log(a) into a relative one,
   so log(a) must be far more accurate than a float. Series: R(z) = sum 2z^k/(2k+1), k <= 7
   (truncation 7e-14); e^r by its Taylor polynomial of degree 10 (truncation 2e-13). */
#define TL_LOG_R_F64(P, z) \
  P##_mul_pd(z, P##_fmadd_pd(P##_fmadd_pd(P##_fmadd_pd(P##_fmadd_pd(P##_fmadd_pd(P##_fmadd_pd( \
    P##_set1_pd(2.0 / 15), z, P##_set1_pd(2.0 / 13)), z, P##_set1_pd(2.0 / 11)), z, P##_set1_pd(2.0 / 9)), z, \
    P##_set1_pd(2.0 / 7)), z, P##_set1_pd(2.0 / 5)), z, P##_set1_pd(2.0 / 3)))
#define TL_EXP_POLY_F64(P, r) \
  P##_fmadd_pd(P##_fmadd_pd(P##_fmadd_pd(P##_fmadd_pd(P##_fmadd_pd(P##_fmadd_pd(P##_fmadd_pd( \
  P##_fmadd_pd(P##_fmadd_pd(P##_fmadd_pd( \
    P##_set1_pd(1.0 / 3628800), r, P##_set1_pd(1.0 / 362880)), r, P##_set1_pd(1.0 / 40320)), r, \
    P##_set1_pd(1.0 / 5040)), r, P##_set1_pd(1.0 / 720)), r, P##_set1_pd(1.0 / 120)), r, \
    P##_set1_pd(1.0 / 24)), r, P##_set1_pd(1.0 / 6)), r, P##_set1_pd(0.5)), r, P##_set1_pd(1.0)), r, \
    P##_set1_pd(1.0))
/* ln 2 split so that n * TL_LN2_HI is exact for |n| < 512 (Cody and Waite). */
#define TL_LN2_HI 0.693145752f
#define TL_LN2_LO 1.42860677e-6f

#ifdef __AVX512F__
static inline __m512 tl_sign_f32x16(__m512 x) {
  return _mm512_castsi512_ps(_mm512_and_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
}
static inline __m512 tl_xor_f32x16(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(_mm512_xor_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
/* e^x = 2^n e^r, x = n ln2 + r; x is clamped to 89, past which the result is inf anyway, and
   scalef rounds 2^n e^r correctly into the denormals. Below -104 the result is 0: those lanes
   compute e^0 and are zeroed after, because an underflowing scalef costs a microcode assist
   per instruction (a masked softmax's -3.4e38 scores would run ten times slower). */
static inline __m512 tl_exp_f32x16(__m512 x) {
  __mmask16 zero = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_LT_OQ);
  x = _mm512_mask_blend_ps(zero, _mm512_min_ps(_mm512_set1_ps(89.0f), x), _mm512_setzero_ps());
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(TL_LN2_HI), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(TL_LN2_LO), r);
  return _mm512_maskz_mov_ps(~zero, _mm512_scalef_ps(TL_EXP_POLY(_mm512, r), n));
}
/* log x = e ln2 + log m with x = 2^e m, m in [sqrt(1/2), sqrt(2)); getexp and getmant read
   denormals correctly. */
static inline __m512 tl_log_f32x16(__m512 x) {
  __m512 e = _mm512_getexp_ps(x);
  __m512 m = _mm512_getmant_ps(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_zero);
  __mmask16 big = _mm512_cmp_ps_mask(m, _mm512_set1_ps(1.41421356f), _CMP_GT_OQ);
  m = _mm512_mask_mul_ps(m, big, m, _mm512_set1_ps(0.5f));
  e = _mm512_mask_add_ps(e, big, e, _mm512_set1_ps(1.0f));
  __m512 f = _mm512_sub_ps(m, _mm512_set1_ps(1.0f));
  __m512 s = _mm512_div_ps(f, _mm512_add_ps(m, _mm512_set1_ps(1.0f)));
  __m512 R = TL_LOG_R(_mm512, _mm512_mul_ps(s, s));
  __m512 y = _mm512_fnmadd_ps(s, _mm512_sub_ps(f, R), f);
  y = _mm512_fmadd_ps(e, _mm512_set1_ps(-1.9046542e-09f), y);
  y = _mm512_fmadd_ps(e, _mm512_set1_ps(0.6931472f), y);
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ), y, _mm512_set1_ps(-INFINITY));
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NGE_UQ), y, _mm512_set1_ps(NAN));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ), y, x);
}
/* tanh and erf work on |x| and take the sign of x at the end (so tanh(-0) = -0). */
static inline __m512 tl_tanh_f32x16(__m512 x) {
  __m512 a = _mm512_abs_ps(x);
  __m512 z = _mm512_mul_ps(a, a);
  __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(a, z), TL_TANH_POLY(_mm512, z), a);
  __m512 c = _mm512_min_ps(_mm512_set1_ps(9.5f), a);
  __m512 d = _mm512_add_ps(tl_exp_f32x16(_mm512_add_ps(c, c)), _mm512_set1_ps(1.0f));
  __m512 large = _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), d));
  __m512 t = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(0.625f), _CMP_LT_OQ), large, small);
  return tl_xor_f32x16(t, tl_sign_f32x16(x));
}
static inline __m512 tl_erf_f32x16(__m512 x) {
  __m512 a = _mm512_abs_ps(x);
  __m512 small = _mm512_mul_ps(a, TL_ERF_SMALL(_mm512, _mm512_mul_ps(a, a)));
  __m512 u = _mm512_sub_ps(_mm512_min_ps(_mm512_set1_ps(3.92f), a), _mm512_set1_ps(2.5f));
  __m512 large = TL_ERF_LARGE(_mm512, u);
  large = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(3.92f), _CMP_GE_OQ), large,
                               _mm512_set1_ps(1.0f));
  __m512 t = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(1.0f), _CMP_LT_OQ), large, small);
  return tl_xor_f32x16(t, tl_sign_f32x16(x));
}
/* sigmoid(x) = 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0, with e = exp(-|x|) <= 1:
   no overflow, and tiny results come out as accurate denormals. */
static inline __m512 tl_sigmoid_f32x16(__m512 x) {
  __m512 e = tl_exp_f32x16(_mm512_castsi512_ps(_mm512_or_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))));
  __m512 num = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_set1_ps(1.0f), e);
  return _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}
/* log of positive finite doubles, for pow */
static inline __m512d tl_pow_log_f64x8(__m512d x) {
  __m512d e = _mm512_getexp_pd(x);
  __m512d m = _mm512_getmant_pd(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_zero);
  __mmask8 big = _mm512_cmp_pd_mask(m, _mm512_set1_pd(1.4142135623730951), _CMP_GT_OQ);
  m = _mm512_mask_mul_pd(m, big, m, _mm512_set1_pd(0.5));
  e = _mm512_mask_add_pd(e, big, e, _mm512_set1_pd(1.0));
  __m512d f = _mm512_sub_pd(m, _mm512_set1_pd(1.0));
  __m512d s = _mm512_div_pd(f, _mm512_add_pd(m, _mm512_set1_pd(1.0)));
  __m512d R = TL_LOG_R_F64(_mm512, _mm512_mul_pd(s, s));
  return _mm512_fmadd_pd(e, _mm512_set1_pd(0.6931471805599453), _mm512_fnmadd_pd(s, _mm512_sub_pd(f, R), f));
}
/* pow's half: |a|^b for 8 lanes in double, then rounded once to float */
static inline __m256 tl_pow_half_f32x16(__m256 abs_a, __m256 b) {
  __m512d x = _mm512_cvtps_pd(abs_a);
  __m512d L = tl_pow_log_f64x8(x);
  L = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, _mm512_setzero_pd(), _CMP_EQ_OQ), L, _mm512_set1_pd(-INFINITY));
  L = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, _mm512_set1_pd(INFINITY), _CMP_EQ_OQ), L, x);
  __m512d y = _mm512_mul_pd(_mm512_cvtps_pd(b), L);
  y = _mm512_max_pd(_mm512_set1_pd(-110.0), _mm512_min_pd(_mm512_set1_pd(100.0), y));
  __m512d n = _mm512_roundscale_pd(_mm512_mul_pd(y, _mm512_set1_pd(1.4426950408889634)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(0.6931471805599453), y);
  r = _mm512_fnmadd_pd(n, _mm512_set1_pd(2.3190468138462996e-17), r);
  return _mm512_cvtpd_ps(_mm512_scalef_pd(TL_EXP_POLY_F64(_mm512, r), n));
}
/* pow(a, b) = exp(b log|a|), with the sign and C's special cases patched in afterwards:
   a < 0 needs an integer b (else NaN) and takes the sign of a when b is odd; pow(a, 0),
   pow(1, b) and pow(-1, +-inf) are 1 even for NaN; pow(+-0, b < 0) is +-inf. */
static inline __m512 tl_pow_f32x16(__m512 a, __m512 b) {
  __m512 abs_a = _mm512_abs_ps(a);
  __m256 lo = tl_pow_half_f32x16(_mm512_castps512_ps256(abs_a), _mm512_castps512_ps256(b));
  __m256 hi = tl_pow_half_f32x16(
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abs_a), 1)),
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(b), 1)));
  __m512 r = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)),
                                                 _mm256_castps_pd(hi), 1));
  __m512 half = _mm512_mul_ps(b, _mm512_set1_ps(0.5f));
  __mmask16 b_int = _mm512_cmp_ps_mask(_mm512_roundscale_ps(b, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC), b, _CMP_EQ_OQ);
  __mmask16 b_odd = _kand_mask16(b_int, _mm512_cmp_ps_mask(
      _mm512_roundscale_ps(half, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC), half, _CMP_NEQ_UQ));
  __mmask16 a_neg = _mm512_cmplt_epi32_mask(_mm512_castps_si512(a), _mm512_setzero_si512());
  r = _mm512_mask_blend_ps(_kand_mask16(a_neg, b_odd), r, tl_xor_f32x16(r, _mm512_set1_ps(-0.0f)));
  __mmask16 nan = _kand_mask16(_kandn_mask16(b_int, _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_LT_OQ)),
                               _mm512_cmp_ps_mask(abs_a, _mm512_set1_ps(INFINITY), _CMP_NEQ_UQ));
  nan = _kor_mask16(nan, _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q));
  r = _mm512_mask_blend_ps(nan, r, _mm512_set1_ps(NAN));
  __mmask16 one = _kor_mask16(_mm512_cmp_ps_mask(a, _mm512_set1_ps(1.0f), _CMP_EQ_OQ),
                              _mm512_cmp_ps_mask(b, _mm512_setzero_ps(), _CMP_EQ_OQ));
  one = _kor_mask16(one, _kand_mask16(_mm512_cmp_ps_mask(abs_a, _mm512_set1_ps(1.0f), _CMP_EQ_OQ),
                                      _mm512_cmp_ps_mask(_mm512_abs_ps(b), _mm512_set1_ps(INFINITY), _CMP_EQ_OQ)));
  return _mm512_mask_blend_ps(one, r, _mm512_set1_ps(1.0f));
}
#endif

#ifdef __AVX2__
static inline __m256 tl_sign_f32x8(__m256 x) { return _mm256_and_ps(_mm256_set1_ps(-0.0f), x); }
/* 2^k for integer k in [-126, 127], built from its exponent bits */
static inline __m256 tl_pow2i_f32x8(__m256i k) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}
/* As the AVX-512 version; 2^n (n in [-150, 128]) is applied in two halves so that both
   factors stay normal and the product rounds once into the denormals. */
static inline __m256 tl_exp_f32x8(__m256 x) {
  __m256 zero = _mm256_cmp_ps(x, _mm256_set1_ps(-104.0f), _CMP_LT_OQ);  /* 0 out, as for AVX-512 */
  x = _mm256_andnot_ps(zero, _mm256_min_ps(_mm256_set1_ps(89.0f), x));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(TL_LN2_HI), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(TL_LN2_LO), r);
  __m256i ni = _mm256_cvtps_epi32(n);
  __m256i n1 = _mm256_srai_epi32(ni, 1);
  __m256 p = _mm256_mul_ps(TL_EXP_POLY(_mm256, r), tl_pow2i_f32x8(n1));
  return _mm256_andnot_ps(zero, _mm256_mul_ps(p, tl_pow2i_f32x8(_mm256_sub_epi32(ni, n1))));
}
static inline __m256 tl_log_f32x8(__m256 x) {
  /* denormals are scaled by 2^23 first so that their exponent field is meaningful */
  __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(1.17549435e-38f), _CMP_LT_OQ);
  __m256 xs = _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(8388608.0f)), tiny);
  __m256i bits = _mm256_castps_si256(xs);
  __m256 e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(127)));
  e = _mm256_sub_ps(e, _mm256_and_ps(tiny, _mm256_set1_ps(23.0f)));
  __m256 m = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)),
                                                 _mm256_set1_epi32(0x3f800000)));
  __m256 big = _mm256_cmp_ps(m, _mm256_set1_ps(1.41421356f), _CMP_GT_OQ);
  m = _mm256_blendv_ps(m, _mm256_mul_ps(m, _mm256_set1_ps(0.5f)), big);
  e = _mm256_add_ps(e, _mm256_and_ps(big, _mm256_set1_ps(1.0f)));
  __m256 f = _mm256_sub_ps(m, _mm256_set1_ps(1.0f));
  __m256 s = _mm256_div_ps(f, _mm256_add_ps(m, _mm256_set1_ps(1.0f)));
  __m256 R = TL_LOG_R(_mm256, _mm256_mul_ps(s, s));
  __m256 y = _mm256_fnmadd_ps(s, _mm256_sub_ps(f, R), f);
  y = _mm256_fmadd_ps(e, _mm256_set1_ps(-1.9046542e-09f), y);
  y = _mm256_fmadd_ps(e, _mm256_set1_ps(0.6931472f), y);
  y = _mm256_blendv_ps(y, _mm256_set1_ps(-INFINITY), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(NAN), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NGE_UQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, _mm256_set1_ps(INFINITY), _CMP_EQ_OQ));
}
static inline __m256 tl_tanh_f32x8(__m256 x) {
  __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  __m256 z = _mm256_mul_ps(a, a);
  __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(a, z), TL_TANH_POLY(_mm256, z), a);
  __m256 c = _mm256_min_ps(_mm256_set1_ps(9.5f), a);
  __m256 d = _mm256_add_ps(tl_exp_f32x8(_mm256_add_ps(c, c)), _mm256_set1_ps(1.0f));
  __m256 large = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), d));
  __m256 t = _mm256_blendv_ps(large, small, _mm256_cmp_ps(a, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
  return _mm256_xor_ps(t, tl_sign_f32x8(x));
}
static inline __m256 tl_erf_f32x8(__m256 x) {
  __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  __m256 small = _mm256_mul_ps(a, TL_ERF_SMALL(_mm256, _mm256_mul_ps(a, a)));
  __m256 u = _mm256_sub_ps(_mm256_min_ps(_mm256_set1_ps(3.92f), a), _mm256_set1_ps(2.5f));
  __m256 large = TL_ERF_LARGE(_mm256, u);
  large = _mm256_blendv_ps(large, _mm256_set1_ps(1.0f), _mm256_cmp_ps(a, _mm256_set1_ps(3.92f), _CMP_GE_OQ));
  __m256 t = _mm256_blendv_ps(large, small, _mm256_cmp_ps(a, _mm256_set1_ps(1.0f), _CMP_LT_OQ));
  return _mm256_xor_ps(t, tl_sign_f32x8(x));
}
static inline __m256 tl_sigmoid_f32x8(__m256 x) {
  __m256 e = tl_exp_f32x8(_mm256_or_ps(x, _mm256_set1_ps(-0.0f)));
  __m256 num = _mm256_blendv_ps(_mm256_set1_ps(1.0f), e, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  return _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}
/* log of positive finite doubles, for pow; the exponent field becomes a double through the
   2^52 trick (AVX2 cannot convert int64 lanes) */
static inline __m256d tl_pow_log_f64x4(__m256d x) {
  __m256i bits = _mm256_castpd_si256(x);
  __m256i two52 = _mm256_set1_epi64x(0x4330000000000000LL);
  __m256d e = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_srli_epi64(bits, 52), two52)),
                            _mm256_set1_pd(4503599627370496.0 + 1023.0));
  __m256d m = _mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi64x(0x000fffffffffffffLL)),
                                                  _mm256_set1_epi64x(0x3ff0000000000000LL)));
  __m256d big = _mm256_cmp_pd(m, _mm256_set1_pd(1.4142135623730951), _CMP_GT_OQ);
  m = _mm256_blendv_pd(m, _mm256_mul_pd(m, _mm256_set1_pd(0.5)), big);
  e = _mm256_add_pd(e, _mm256_and_pd(big, _mm256_set1_pd(1.0)));
  __m256d f = _mm256_sub_pd(m, _mm256_set1_pd(1.0));
  __m256d s = _mm256_div_pd(f, _mm256_add_pd(m, _mm256_set1_pd(1.0)));
  __m256d R = TL_LOG_R_F64(_mm256, _mm256_mul_pd(s, s));
  return _mm256_fmadd_pd(e, _mm256_set1_pd(0.6931471805599453), _mm256_fnmadd_pd(s, _mm256_sub_pd(f, R), f));
}
/* pow's quarter: |a|^b for 4 lanes in double, then rounded once to float */
static inline __m128 tl_pow_quarter_f32x8(__m128 abs_a, __m128 b) {
  __m256d x = _mm256_cvtps_pd(abs_a);
  __m256d L = tl_pow_log_f64x4(x);
  L = _mm256_blendv_pd(L, _mm256_set1_pd(-INFINITY), _mm256_cmp_pd(x, _mm256_setzero_pd(), _CMP_EQ_OQ));
  L = _mm256_blendv_pd(L, x, _mm256_cmp_pd(x, _mm256_set1_pd(INFINITY), _CMP_EQ_OQ));
  __m256d y = _mm256_mul_pd(_mm256_cvtps_pd(b), L);
  y = _mm256_max_pd(_mm256_set1_pd(-110.0), _mm256_min_pd(_mm256_set1_pd(100.0), y));
  __m256d n = _mm256_round_pd(_mm256_mul_pd(y, _mm256_set1_pd(1.4426950408889634)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(0.6931471805599453), y);
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(2.3190468138462996e-17), r);
  /* 2^n from the low bits of n + 1023 + 2^52, shifted into the exponent field */
  __m256i k = _mm256_castpd_si256(_mm256_add_pd(n, _mm256_set1_pd(4503599627370496.0 + 1023.0)));
  __m256d scale = _mm256_castsi256_pd(_mm256_slli_epi64(k, 52));
  return _mm256_cvtpd_ps(_mm256_mul_pd(TL_EXP_POLY_F64(_mm256, r), scale));
}
/* See tl_pow_f32x16 for the special cases. */
static inline __m256 tl_pow_f32x8(__m256 a, __m256 b) {
  __m256 abs_a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a);
  __m128 lo = tl_pow_quarter_f32x8(_mm256_castps256_ps128(abs_a), _mm256_castps256_ps128(b));
  __m128 hi = tl_pow_quarter_f32x8(_mm256_extractf128_ps(abs_a, 1), _mm256_extractf128_ps(b, 1));
  __m256 r = _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
  __m256 half = _mm256_mul_ps(b, _mm256_set1_ps(0.5f));
  __m256 b_int = _mm256_cmp_ps(_mm256_floor_ps(b), b, _CMP_EQ_OQ);
  __m256 b_odd = _mm256_and_ps(b_int, _mm256_cmp_ps(_mm256_floor_ps(half), half, _CMP_NEQ_UQ));
  r = _mm256_xor_ps(r, _mm256_and_ps(b_odd, tl_sign_f32x8(a)));
  __m256 nan = _mm256_andnot_ps(b_int, _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_LT_OQ));
  nan = _mm256_and_ps(nan, _mm256_cmp_ps(abs_a, _mm256_set1_ps(INFINITY), _CMP_NEQ_UQ));
  nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
  r = _mm256_blendv_ps(r, _mm256_set1_ps(NAN), nan);
  __m256 one = _mm256_or_ps(_mm256_cmp_ps(a, _mm256_set1_ps(1.0f), _CMP_EQ_OQ),
                            _mm256_cmp_ps(b, _mm256_setzero_ps(), _CMP_EQ_OQ));
  __m256 abs_b = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), b);
  one = _mm256_or_ps(one, _mm256_and_ps(_mm256_cmp_ps(abs_a, _mm256_set1_ps(1.0f), _CMP_EQ_OQ),
                                        _mm256_cmp_ps(abs_b, _mm256_set1_ps(INFINITY), _CMP_EQ_OQ)));
  return _mm256_blendv_ps(r, _mm256_set1_ps(1.0f), one);
}
/* f32x4 runs the f32x8 code on the low half of a zero-extended register. */
static inline __m256 tl_widen_f32x4(__m128 x) { return _mm256_insertf128_ps(_mm256_setzero_ps(), x, 0); }
#define TL_F32X4_FROM_F32X8(NAME) \
  static inline __m128 tl_##NAME##_f32x4(__m128 x) { \
    return _mm256_castps256_ps128(tl_##NAME##_f32x8(tl_widen_f32x4(x))); \
  }
TL_F32X4_FROM_F32X8(exp) TL_F32X4_FROM_F32X8(log) TL_F32X4_FROM_F32X8(tanh)
TL_F32X4_FROM_F32X8(erf) TL_F32X4_FROM_F32X8(sigmoid)
static inline __m128 tl_pow_f32x4(__m128 a, __m128 b) {
  return _mm256_castps256_ps128(tl_pow_f32x8(tl_widen_f32x4(a), tl_widen_f32x4(b)));
}
#endif
""".strip()
