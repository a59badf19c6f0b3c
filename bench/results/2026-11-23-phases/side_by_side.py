import argparse, ctypes, numpy as np, statistics, sys, time
from taskloom.bench.op import MatmulProblem, ort_call
from taskloom.bench.timing import time_rounds
M=N=K=512
problem=MatmulProblem((M,N,K), argparse.Namespace(batch=None))  # bench op's inputs and ORT model
a,b=problem.arrays["a"],problem.arrays["b"]
want=problem.reference()
calls={}
names=sys.argv[1].split(",")
for n in names:
    lib=ctypes.CDLL(f"./{n}.so")
    c=np.zeros((M,N),np.float32)
    P=ctypes.c_void_p
    f=lib.matmul; f.argtypes=[P,P,P]
    args=(a.ctypes.data,b.ctypes.data,c.ctypes.data)
    f(*args)
    err=np.abs(c-want).max()
    print(n, "err", err)
    if hasattr(lib, "set_skip") and n!="v0" and n!="v2_shared": lib.set_skip(1)
    calls[n]=(lambda f=f,args=args,c=c: f(*args))
calls["ort"]=ort_call(problem, 2)
t=time_rounds(calls, repeats=int(sys.argv[3]) if len(sys.argv)>3 else 20, rounds=int(sys.argv[2]) if len(sys.argv)>2 else 10)
med={k: statistics.median(x for r in v for x in r) for k,v in t.items()}
for k,v in med.items(): print(f"{k:14s} {v:.4f} ms  {2*M*N*K/v/1e6:.1f} GF  vs v0 {med[names[0]]/v:.3f}")
# paired: per round, ratio of round medians vs the first
base = [statistics.median(r) for r in t[names[0]]]
for k in t:
    rs = sorted(b / statistics.median(r) for b, r in zip(base, t[k]))
    n = len(rs)
    print(f"paired {k:14s} median {statistics.median(rs):.3f}  q1 {rs[n//4]:.3f} q3 {rs[3*n//4]:.3f}")
