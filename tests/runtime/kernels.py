"""The hand-written C library the runtime tests load, and its signatures."""
import numpy as np

SOURCE = r"""
#include <stdbool.h>
#include <stdint.h>
#include <omp.h>

void axpy(int32_t N, float a, const float* x, float* y) {
    #pragma omp parallel for
    for (int32_t i = 0; i < N; ++i) y[i] += a * x[i];
}

/* C[M, N] = A[M, 8] @ B[8, N] */
void matmul(int32_t M, int32_t N, const float* A, const float* B, float* C) {
    #pragma omp parallel for
    for (int32_t i = 0; i < M; ++i)
        for (int32_t j = 0; j < N; ++j) {
            float acc = 0.0f;
            for (int32_t k = 0; k < 8; ++k) acc += A[i * 8 + k] * B[k * N + j];
            C[i * N + j] = acc;
        }
}

/* y[i] = x[2i] + x[2i + 1]; x has N * 2 elements */
void pairsum(int64_t N, const double* x, double* y) {
    for (int64_t i = 0; i < N; ++i) y[i] = x[2 * i] + x[2 * i + 1];
}

/* sums of blocks of 4: x is [(N + 3) // 4, 4], y is [(N + 3) // 4] */
void blocksum(int32_t N, const float* x, float* y) {
    for (int32_t b = 0; b < (N + 3) / 4; ++b) y[b] = x[4 * b] + x[4 * b + 1] + x[4 * b + 2] + x[4 * b + 3];
}

/* out[i] = (neg ? -1 : 1) * v * i for i < n; out is a pointer parameter */
void ramp(int64_t n, double v, bool neg, double* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = (neg ? -v : v) * (double)i;
}

void scale_i8(int32_t N, int8_t s, const int8_t* x, int8_t* y) {
    for (int32_t i = 0; i < N; ++i) y[i] = (int8_t)(x[i] * s);
}

/* bfloat16 travels as its 16 bits */
void bf16_negate(int32_t N, uint16_t* x) {
    for (int32_t i = 0; i < N; ++i) x[i] ^= (uint16_t)0x8000u;
}

void bf16_widen(int32_t N, const uint16_t* x, float* y) {
    for (int32_t i = 0; i < N; ++i) {
        union { uint32_t u; float f; } bits;
        bits.u = (uint32_t)x[i] << 16;
        y[i] = bits.f;
    }
}

void count_threads(int32_t* out) {
    #pragma omp parallel
    {
        #pragma omp single
        out[0] = omp_get_num_threads();
    }
}

void taskloom_set_num_threads(int n) { omp_set_num_threads(n); }
int taskloom_get_num_threads(void) { return omp_get_max_threads(); }
"""


def scalar(name, dtype="int32"):
    return {"name": name, "kind": "scalar", "dtype": dtype}


def tensor(name, dtype, shape, written=False):
    return {"name": name, "kind": "tensor", "dtype": dtype, "shape": shape, "written": written}


SIGNATURES = [
    {"name": "axpy", "params": [scalar("N"), scalar("a", "float32"), tensor("x", "float32", ["N"]),
                                tensor("y", "float32", ["N"], written=True)]},
    {"name": "matmul", "params": [scalar("M"), scalar("N"), tensor("A", "float32", ["M", 8]),
                                  tensor("B", "float32", [8, "N"]),
                                  tensor("C", "float32", ["M", "N"], written=True)]},
    {"name": "pairsum", "params": [scalar("N", "int64"), tensor("x", "float64", ["N * 2"]),
                                   tensor("y", "float64", ["N"], written=True)]},
    {"name": "blocksum", "params": [scalar("N"), tensor("x", "float32", ["(N + 3) // 4", 4]),
                                    tensor("y", "float32", ["(N + 3) // 4"], written=True)]},
    {"name": "ramp", "params": [scalar("n", "int64"), scalar("v", "float64"), scalar("neg", "bool"),
                                {"name": "out", "kind": "pointer", "dtype": "float64", "written": True}]},
    {"name": "scale_i8", "params": [scalar("N"), scalar("s", "int8"), tensor("x", "int8", ["N"]),
                                    tensor("y", "int8", ["N"], written=True)]},
    {"name": "bf16_negate", "params": [scalar("N"), tensor("x", "bfloat16", ["N"], written=True)]},
    {"name": "bf16_widen", "params": [scalar("N"), tensor("x", "bfloat16", ["N"]),
                                      tensor("y", "float32", ["N"], written=True)]},
    {"name": "count_threads", "params": [{"name": "out", "kind": "pointer", "dtype": "int32",
                                          "written": True}]},
]


def check_usable(module):
    """The process and the module still work: a correct call gives the right numbers."""
    x = np.arange(5, dtype=np.float32)
    y = np.ones(5, dtype=np.float32)
    module.axpy(5, 2.0, x, y)
    np.testing.assert_array_equal(y, 1 + 2 * x)
