"""The C prelude every generated translation unit starts with: headers and small helpers
(the status run-time index checks report to, bfloat16 conversion, min/max, tail masks,
vector reductions) and the vector math of
:mod:`taskloom.backend.c_vector_math`."""

from taskloom.backend.c_vector_math import VECTOR_MATH

#: The scratch blocks' state, defined once in a library: a library built as several
#: translation units (:mod:`taskloom.backend.c_units`) shares it, hidden from other libraries.
SCRATCH_STATE = r"""#define TL_HIDDEN __attribute__((visibility("hidden")))
TL_HIDDEN __thread tl_scratch_t tl_scratch;
TL_HIDDEN pthread_key_t tl_scratch_key;
TL_HIDDEN pthread_once_t tl_scratch_once = PTHREAD_ONCE_INIT;
TL_HIDDEN int tl_scratch_keyed;
__attribute__((destructor)) static void tl_scratch_unload(void) {
  /* a thread that ends after the library is gone must not call into it */
  if (tl_scratch_keyed) pthread_key_delete(tl_scratch_key);
}
"""

#: What the library's other translation units declare in place of :data:`SCRATCH_STATE`.
SCRATCH_STATE_DECLARED = r"""#define TL_HIDDEN __attribute__((visibility("hidden")))
extern TL_HIDDEN __thread tl_scratch_t tl_scratch;
extern TL_HIDDEN pthread_key_t tl_scratch_key;
extern TL_HIDDEN pthread_once_t tl_scratch_once;
extern TL_HIDDEN int tl_scratch_keyed;
"""

PRELUDE = r"""
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <immintrin.h>

/* Scratch for buffers too large for the stack (a matmul's packed panels and partial sums).
   Each thread keeps one block per library and reuses it from call to call: freeing such a
   buffer hands its pages back to the system, and the next call would fault every page in
   again (hundreds a call, a fifth of a small matmul's time). Buffers are taken and given
   back in nested order; one that does not fit while others are out comes from the heap,
   and the block grows to hold them all on the next call. A thread's block is freed when
   the thread ends. */
typedef struct { char* base; size_t size, used, want, spilled; } tl_scratch_t;
""" + SCRATCH_STATE + r"""static void tl_scratch_release(void* s) { free(((tl_scratch_t*)s)->base); }
static void tl_scratch_make_key(void) { tl_scratch_keyed = pthread_key_create(&tl_scratch_key, tl_scratch_release) == 0; }
__attribute__((malloc, assume_aligned(64), alloc_size(1)))
static inline void* tl_scratch_take(size_t bytes) {
  tl_scratch_t* s = &tl_scratch;
  if (s->used == 0) s->spilled = 0;
  if (s->used + s->spilled + bytes > s->want) s->want = s->used + s->spilled + bytes;
  if (s->used == 0 && s->want > s->size) {  /* nothing out: grow to the most a call has held */
    free(s->base);
    s->base = (char*)aligned_alloc(64, s->want);
    s->size = s->base ? s->want : 0;
    pthread_once(&tl_scratch_once, tl_scratch_make_key);
    if (tl_scratch_keyed) pthread_setspecific(tl_scratch_key, s);
  }
  if (s->used + bytes > s->size) {
    s->spilled += bytes;
    return aligned_alloc(64, bytes);
  }
  void* p = s->base + s->used;
  s->used += bytes;
  return p;
}
static inline void tl_scratch_give(void* p) {
  tl_scratch_t* s = &tl_scratch;
  if ((char*)p >= s->base && (char*)p < s->base + s->size) s->used = (size_t)((char*)p - s->base);
  else free(p);
}

/* Run-time checks report to their caller through a status the caller passes to each call:
   the first failed check (its 1-based number in taskloom_checks, 0 while none failed), the
   value it refused and the valid range [low, high]. The first failure wins, whichever
   thread hits it: the compare-exchange claims the status, the winner fills it in. */
typedef struct { int64_t check, value, low, high; } tl_status;
__attribute__((cold, noinline))
static void tl_check_failed(tl_status* st, int64_t check, int64_t value, int64_t low, int64_t high) {
  int64_t none = 0;
  if (__atomic_compare_exchange_n(&st->check, &none, -1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
    st->value = value; st->low = low; st->high = high;
    __atomic_store_n(&st->check, check, __ATOMIC_RELEASE);
  }
}
/* An index read from data, as a position in [0, n): one unsigned compare. Out of range it
   is reported and reads position 0, so no load leaves the tensor. The _wrap form first
   counts a negative index from the end (-1 is n - 1), as numpy and ONNX do. */
static inline int64_t tl_index(int64_t i, int64_t n, tl_status* st, int64_t check) {
  if (__builtin_expect((uint64_t)i >= (uint64_t)n, 0)) { tl_check_failed(st, check, i, 0, n - 1); return 0; }
  return i;
}
static inline int64_t tl_index_wrap(int64_t i, int64_t n, tl_status* st, int64_t check) {
  int64_t w = i < 0 ? i + n : i;
  if (__builtin_expect((uint64_t)w >= (uint64_t)n, 0)) { tl_check_failed(st, check, i, -n, n - 1); return 0; }
  return w;
}

/* bfloat16 is stored as its 16 bits; arithmetic goes through float. */
typedef uint16_t tl_bf16;
static inline float tl_bf16_to_f32(tl_bf16 x) {
  union { uint32_t u; float f; } v = { (uint32_t)x << 16 };
  return v.f;
}
static inline tl_bf16 tl_f32_to_bf16(float x) {
  union { float f; uint32_t u; } v = { x };
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (tl_bf16)((v.u >> 16) | 0x40);  /* quiet NaN */
  return (tl_bf16)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);  /* round to nearest even */
}

#define TL_MINMAX(T, S) \
  static inline T tl_min_##S(T a, T b) { return a < b ? a : b; } \
  static inline T tl_max_##S(T a, T b) { return a > b ? a : b; }
/* Float min/max propagate NaN from either side, as torch and numpy do (C's a > b ? a : b
   would drop a NaN in a). */
#define TL_FMINMAX(T, S) \
  static inline T tl_min_##S(T a, T b) { return (a < b || a != a) ? a : b; } \
  static inline T tl_max_##S(T a, T b) { return (a > b || a != a) ? a : b; }
TL_FMINMAX(double, f64) TL_FMINMAX(float, f32) TL_FMINMAX(_Float16, f16)
TL_MINMAX(int64_t, i64) TL_MINMAX(int32_t, i32) TL_MINMAX(int16_t, i16) TL_MINMAX(int8_t, i8)
TL_MINMAX(uint8_t, u8) TL_MINMAX(bool, boolean)
static inline int64_t tl_abs_i64(int64_t a) { return a < 0 ? -a : a; }
static inline int32_t tl_abs_i32(int32_t a) { return a < 0 ? -a : a; }
static inline int16_t tl_abs_i16(int16_t a) { return a < 0 ? -a : a; }
static inline int8_t tl_abs_i8(int8_t a) { return a < 0 ? -a : a; }
static inline uint8_t tl_abs_u8(uint8_t a) { return a; }
static inline float tl_sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline double tl_sigmoid_f64(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline size_t tl_round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

#ifdef __AVX512F__
static inline __mmask16 tl_mask16(int32_t n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}
static inline float tl_reduce_add_f32x16(__m512 v) { return _mm512_reduce_add_ps(v); }
/* max_ps/min_ps return their second operand when either is NaN; these keep a NaN in the
   first one too, so a NaN anywhere in a max or min reaches the result. */
static inline __m512 tl_max_f32x16(__m512 a, __m512 b) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_max_ps(a, b), a);
}
static inline __m512 tl_min_f32x16(__m512 a, __m512 b) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_min_ps(a, b), a);
}
static inline float tl_reduce_max_f32x16(__m512 v) {
  return _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) ? NAN : _mm512_reduce_max_ps(v);
}
static inline float tl_reduce_min_f32x16(__m512 v) {
  return _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) ? NAN : _mm512_reduce_min_ps(v);
}
static inline __m512 tl_abs_f32x16(__m512 v) { return _mm512_abs_ps(v); }
#endif

#ifdef __AVX2__
static inline __m256i tl_mask8(int32_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline __m128i tl_mask4(int32_t n) {
  return _mm_cmpgt_epi32(_mm_set1_epi32(n), _mm_setr_epi32(0, 1, 2, 3));
}
/* Horizontal reductions: halve the vector with OP until one lane is left. */
#define TL_REDUCE(NAME, OP) \
  static inline float tl_reduce_##NAME##_f32x4(__m128 v) { \
    v = _mm_##OP##_ps(v, _mm_movehl_ps(v, v)); \
    v = _mm_##OP##_ss(v, _mm_shuffle_ps(v, v, 1)); \
    return _mm_cvtss_f32(v); \
  } \
  static inline float tl_reduce_##NAME##_f32x8(__m256 v) { \
    return tl_reduce_##NAME##_f32x4(_mm_##OP##_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1))); \
  }
TL_REDUCE(add, add) TL_REDUCE(halve_max, max) TL_REDUCE(halve_min, min)
/* NaN-propagating max/min, lane-wise and horizontal (see the AVX-512 versions above) */
#define TL_VMINMAX(W, P, V, ANY_NAN) \
  static inline V tl_max_f32x##W(V a, V b) { return P##_blendv_ps(P##_max_ps(a, b), a, P##_cmp_ps(a, a, _CMP_UNORD_Q)); } \
  static inline V tl_min_f32x##W(V a, V b) { return P##_blendv_ps(P##_min_ps(a, b), a, P##_cmp_ps(a, a, _CMP_UNORD_Q)); } \
  static inline float tl_reduce_max_f32x##W(V v) { return ANY_NAN(P##_cmp_ps(v, v, _CMP_UNORD_Q)) ? NAN : tl_reduce_halve_max_f32x##W(v); } \
  static inline float tl_reduce_min_f32x##W(V v) { return ANY_NAN(P##_cmp_ps(v, v, _CMP_UNORD_Q)) ? NAN : tl_reduce_halve_min_f32x##W(v); }
TL_VMINMAX(8, _mm256, __m256, _mm256_movemask_ps) TL_VMINMAX(4, _mm, __m128, _mm_movemask_ps)
static inline __m256 tl_abs_f32x8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
static inline __m128 tl_abs_f32x4(__m128 v) { return _mm_andnot_ps(_mm_set1_ps(-0.0f), v); }
#endif
""".strip() + "\n\n" + VECTOR_MATH
