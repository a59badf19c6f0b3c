"""CUDA kernels in kernel script, shared by the IR, backend and emulator tests."""

#: A sum over N floats: a warp reduction per warp, the warps' sums in shared memory, one
#: atomic add per block.
REDUCE = '''
@kernel(kind='cuda_kernel', grid=('(N + 255) // 256', 1, 1), block=(256, 1, 1), dynamic_shared=0)
def block_sum(N: i32, x: f32[N], total: f32[1]):
    s = shared_tensor(f32, [8])
    i = blockIdx.x * 256 + threadIdx.x
    v: f32 = 0.0
    if i < N:
        v = x[i]
    v = warp_sum(v)
    if threadIdx.x % 32 == 0:
        s[threadIdx.x // 32] = v
    barrier()
    if threadIdx.x == 0:
        t: f32 = 0.0
        for k in range(8):
            t = t + s[k]
        atomic_add(total[0], t)
'''

#: One warp computes c = a @ b (16 x 16 times 16 x 8, fp16 in, fp32 out) with ldmatrix and
#: mma.sync m16n8k16: lane l gives row l % 8 of matrix l // 8 to ldmatrix, and holds
#: c[l // 4 + 8h, 2 (l % 4) + k] in acc[2h + k].
MMA = '''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(32, 1, 1), dynamic_shared=0)
def mma16(a: f16[16, 16], b: f16[16, 8], c: f32[16, 8]):
    sa = shared_tensor(f16, [16, 16])
    sb = shared_tensor(f16, [16, 8])
    ra = register_tensor(f16, [8])
    rb = register_tensor(f16, [4])
    acc = register_tensor(f32, [4])
    lane = threadIdx.x
    for i, j in (repeat(8, 1) * spatial(2, 16)).on(lane):
        sa[i, j] = a[i, j]
    for i, j in (repeat(4, 1) * spatial(4, 8)).on(lane):
        sb[i, j] = b[i, j]
    for k in range(4):
        acc[k] = 0.0
    barrier()
    ldmatrix(ra[0], sa[lane // 8 % 2 * 8 + lane % 8, lane // 16 * 8])
    ldmatrix(rb[0], sb[lane % 16, 0], num=2, trans=True)
    mma_sync(acc[0], ra[0], rb[0], acc[0])
    for h, k in repeat(2, 2).on(0):
        c[lane // 4 + h * 8, lane % 4 * 2 + k] = acc[h * 2 + k]
'''
