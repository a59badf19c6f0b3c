"""CUDA kernels in kernel script for the emulator's tests, and the helper that lowers them."""
from __future__ import annotations

from taskloom.ir.stmt import Function
from taskloom.script import parse_source
from taskloom.transforms import lower


def build(source: str, **env: object) -> Function:
    """The lowered kernel of ``source`` (closure constants from ``env``)."""
    return lower(parse_source(source, env=env))


#: y = 2 x + 1 over N elements, the edge predicated.
SCALE = '''
@kernel(kind='cuda_kernel', grid=('(N + 255) // 256', 1, 1), block=(256, 1, 1))
def scale(N: i32, x: f32[N], y: f32[N]):
    i = blockIdx.x * 256 + threadIdx.x
    if i < N:
        y[i] = x[i] * 2.0 + 1.0
'''

#: A sum: a tree in shared memory with barriers, warp_sum for the last warp, one atomic
#: add per block.
BLOCK_SUM = '''
@kernel(kind='cuda_kernel', grid=('(N + 255) // 256', 1, 1), block=(256, 1, 1))
def tree_sum(N: i32, x: f32[N], total: f32[1]):
    s = shared_tensor(f32, [256])
    tid = threadIdx.x
    i = blockIdx.x * 256 + tid
    v: f32 = 0.0
    if i < N:
        v = x[i]
    s[tid] = v
    barrier()
    for level in range(3):
        half = 128 >> level
        if tid < half:
            s[tid] = s[tid] + s[tid + half]
        barrier()
    if tid < 32:
        w = warp_sum(s[tid])
        if tid == 0:
            atomic_add(total[0], w)
'''

#: C = A B, a BM x BN tile per block of 256 threads, each thread a TM x TN register tile,
#: A and B staged through shared memory BK at a time; every edge predicated.
MATMUL = '''
@kernel(kind='cuda_kernel', grid=('(N + BN - 1) // BN', '(M + BM - 1) // BM', 1), block=(256, 1, 1))
def matmul(M: i32, N: i32, K: i32, A: f32[M, K], B: f32[K, N], C: f32[M, N]):
    sa = shared_tensor(f32, [BM, BK])
    sb = shared_tensor(f32, [BK, BN])
    acc = register_tensor(f32, [TM, TN])
    tid = threadIdx.x
    m0 = blockIdx.y * BM
    n0 = blockIdx.x * BN
    for i, j in repeat(TM, TN).on(0):
        acc[i, j] = 0.0
    for k0 in range((K + BK - 1) // BK):
        for i, k in (repeat(BM * BK // 256, 1) * spatial(256 // BK, BK)).on(tid):
            a: f32 = 0.0
            if m0 + i < M and k0 * BK + k < K:
                a = A[m0 + i, k0 * BK + k]
            sa[i, k] = a
        for k, j in (repeat(BK * BN // 256, 1) * spatial(256 // BN, BN)).on(tid):
            b: f32 = 0.0
            if k0 * BK + k < K and n0 + j < N:
                b = B[k0 * BK + k, n0 + j]
            sb[k, j] = b
        barrier()
        for k in range(BK):
            for i, j in (spatial(16, 16) * repeat(TM, TN)).on(tid):
                acc[i % TM, j % TN] = acc[i % TM, j % TN] + sa[i, k] * sb[k, j]
        barrier()
    for i, j in (spatial(16, 16) * repeat(TM, TN)).on(tid):
        if m0 + i < M and n0 + j < N:
            C[m0 + i, n0 + j] = acc[i % TM, j % TN]
'''


def matmul(bm: int = 64, bn: int = 64, bk: int = 8) -> Function:
    return build(MATMUL, BM=bm, BN=bn, BK=bk, TM=bm // 16, TN=bn // 16)


#: y = x through shared memory, 256 floats a tile, 16 bytes a thread by cp.async, double
#: buffered: the copy of tile t + 1 is in flight while tile t is read. Block b takes tiles
#: b, b + 3, b + 6, ... (so blocks run different trip counts).
STAGED_COPY = '''
@kernel(kind='cuda_kernel', grid=(3, 1, 1), block=(64, 1, 1))
def staged_copy(N: i32, x: f32[N], y: f32[N]):
    s = shared_tensor(f32, [2, 256])
    tid = threadIdx.x
    tiles = (N + 255) // 256
    mine = (tiles - blockIdx.x + 2) // 3
    first = blockIdx.x * 256 + tid * 4
    cp_async(s[0, tid * 4], x[first], 16, src_bytes=min(max(N - first, 0), 4) * 4)
    cp_async_commit()
    for t in range(mine):
        base = (blockIdx.x + 3 * t) * 256
        nxt = base + 3 * 256 + tid * 4
        if t + 1 < mine:
            cp_async(s[(t + 1) % 2, tid * 4], x[nxt], 16, src_bytes=min(max(N - nxt, 0), 4) * 4)
        cp_async_commit()
        cp_async_wait(1)
        barrier()
        for k in range(4):
            if base + tid + 64 * k < N:
                y[base + tid + 64 * k] = s[t % 2, tid + 64 * k]
        barrier()
'''

#: One warp: c = a @ b (16 x 16 by 16 x 8, 16-bit floats in, fp32 out) through ldmatrix and
#: mma.sync m16n8k16. Lane l gives row l % 8 of matrix l // 8: A's four 8 x 8 quarters in
#: the order the A fragment holds them (rows 0-7 | 8-15, then columns 8-15), B's two k
#: halves transposed; lane l holds c[l // 4 + 8 h, 2 (l % 4) + k] in acc[2 h + k].
MMA = '''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(32, 1, 1))
def mma16(a: T[16, 16], b: T[16, 8], c: f32[16, 8]):
    sa = shared_tensor(T, [16, 16])
    sb = shared_tensor(T, [16, 8])
    ra = register_tensor(T, [8])
    rb = register_tensor(T, [4])
    acc = register_tensor(f32, [4])
    lane = threadIdx.x
    for i, j in (repeat(8, 1) * spatial(2, 16)).on(lane):
        sa[i, j] = a[i, j]
    for i, j in (repeat(4, 1) * spatial(4, 8)).on(lane):
        sb[i, j] = b[i, j]
    for k in range(4):
        acc[k] = c[lane // 4 + k // 2 * 8, lane % 4 * 2 + k % 2]
    barrier()
    ldmatrix(ra[0], sa[A_ROW, A_COL])
    ldmatrix(rb[0], sb[lane % 16, 0], num=2, trans=True)
    mma_sync(acc[0], ra[0], rb[0], acc[0])
    for h, k in repeat(2, 2).on(0):
        c[lane // 4 + h * 8, lane % 4 * 2 + k] = acc[h * 2 + k]
'''
#: ldmatrix's addresses for the A fragment, right and (matrices 1 and 2 swapped) wrong
A_ADDRESS = ("lane // 8 % 2 * 8 + lane % 8", "lane // 16 * 8")
A_ADDRESS_SWAPPED = ("lane // 16 * 8 + lane % 8", "lane // 8 % 2 * 8")


def mma16(dtype: str = "f16", address: tuple[str, str] = A_ADDRESS) -> Function:
    src = MMA.replace("A_ROW", address[0]).replace("A_COL", address[1]).replace("T[", f"{dtype}[")
    return build(src.replace("(T,", f"({dtype},"))

#: y = 2 x, four floats a thread moved by two 16-byte copies; ``offset`` shifts the load
#: (a non-zero one is off the 16-byte grid).
WIDE_SCALE = '''
@kernel(kind='cuda_kernel', grid=('(N + 1023) // 1024', 1, 1), block=(256, 1, 1))
def wide_scale(N: i32, x: f32[N], y: f32[N], offset: i32):
    r = register_tensor(f32, [4])
    i = (blockIdx.x * 256 + threadIdx.x) * 4
    if i + 4 + offset <= N:
        copy_vector(r[0], x[i + offset], 16)
        for k in range(4):
            r[k] = r[k] * 2.0
        copy_vector(y[i], r[0], 16)
'''
