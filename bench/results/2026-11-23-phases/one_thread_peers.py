import argparse, time, numpy as np, torch, statistics
from taskloom.bench.op import MatmulProblem, ort_call
torch.set_num_threads(1)
def bench(f, n=200):
    for _ in range(20): f()
    ts=[]
    for r in range(15):
        t=time.perf_counter()
        for _ in range(n): f()
        ts.append((time.perf_counter()-t)/n)
    return statistics.median(ts)
for M,N,K in [(256,512,512),(512,256,512),(512,512,256)]:
    problem=MatmulProblem((M,N,K), argparse.Namespace(batch=None))  # bench op's inputs and ORT model
    a,b=(torch.from_numpy(problem.arrays[k]) for k in ("a","b")); c=torch.empty(M,N)
    t=bench(lambda: torch.matmul(a,b,out=c), 200 if M<512 else 100)
    ort1=ort_call(problem, 1)
    t2=bench(ort1, 200 if M<512 else 100)
    fl=2*M*N*K
    print(M,N,K,"torch1t %.3f ms %.1f GF  ort1t %.3f ms %.1f GF"%(t*1e3,fl/t/1e9,t2*1e3,fl/t2/1e9))
