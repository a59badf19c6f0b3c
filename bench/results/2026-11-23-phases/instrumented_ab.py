import ctypes, numpy as np, time, statistics, sys
M=N=K=512
rng=np.random.default_rng(0)
a=rng.standard_normal((M,K),dtype=np.float32); b=rng.standard_normal((K,N),dtype=np.float32)
libs={}
for n in sys.argv[1].split(","):
    lib=ctypes.CDLL(f"./{n}.so"); P=ctypes.c_void_p; f=lib.matmul; f.argtypes=[P,P,P]
    c=np.zeros((M,N),np.float32); libs[n]=(lib,f,(a.ctypes.data,b.ctypes.data,c.ctypes.data),c)
    f(*libs[n][2]); assert np.allclose(c, a@b, atol=1e-3)
res={n:[] for n in libs}; calls={n:[] for n in libs}
o=(ctypes.c_ulonglong*16)()
for rnd in range(int(sys.argv[2])):
    for n,(lib,f,args,c) in (list(libs.items())[rnd%2:]+list(libs.items())[:rnd%2]):
        for _ in range(10): f(*args)
        lib.reset_t(); t=time.perf_counter()
        for _ in range(100): f(*args)
        calls[n].append((time.perf_counter()-t)/100*1e6)
        lib.get_t(o); v=list(o)
        res[n].append([v[w*8+j]/v[w*8+3]/2600 for w in range(2) for j in range(3)])
for n in libs:
    r=np.array(res[n]); med=np.median(r,axis=0)
    print(f"{n:8s} call {statistics.median(calls[n]):.1f} us | per core: packB {med[0]:.1f}/{med[3]:.1f} packA {med[1]:.1f}/{med[4]:.1f} total {med[2]:.1f}/{med[5]:.1f}")
names=list(libs); base=calls[names[0]]
for n in names[1:]:
    rs=sorted(x/y for x,y in zip(base,calls[n])); print(f"paired {n} speed-up median {statistics.median(rs):.3f} q1 {rs[len(rs)//4]:.3f} q3 {rs[3*len(rs)//4]:.3f}")
