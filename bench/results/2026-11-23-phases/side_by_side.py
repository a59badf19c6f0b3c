import ctypes, numpy as np, statistics, sys, time
from taskloom.bench.timing import time_rounds
M=N=K=512
rng=np.random.default_rng(0)
a=rng.standard_normal((M,K),dtype=np.float32); b=rng.standard_normal((K,N),dtype=np.float32)
want=a@b
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
import onnxruntime as ort
from onnx import helper, TensorProto
g=helper.make_graph([helper.make_node("MatMul",["a","b"],["c"])],"g",
    [helper.make_tensor_value_info("a",TensorProto.FLOAT,[M,K]),helper.make_tensor_value_info("b",TensorProto.FLOAT,[K,N])],
    [helper.make_tensor_value_info("c",TensorProto.FLOAT,[M,N])])
m=helper.make_model(g, opset_imports=[helper.make_opsetid("",13)], ir_version=9)
so=ort.SessionOptions(); so.intra_op_num_threads=2
s=ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
calls["ort"]=lambda: s.run(None,{"a":a,"b":b})
t=time_rounds(calls, repeats=int(sys.argv[3]) if len(sys.argv)>3 else 20, rounds=int(sys.argv[2]) if len(sys.argv)>2 else 10)
med={k: statistics.median(x for r in v for x in r) for k,v in t.items()}
for k,v in med.items(): print(f"{k:14s} {v:.4f} ms  {2*M*N*K/v/1e6:.1f} GF  vs v0 {med[names[0]]/v:.3f}")
# paired: per round, ratio of round medians vs the first
base = [statistics.median(r) for r in t[names[0]]]
for k in t:
    rs = sorted(b / statistics.median(r) for b, r in zip(base, t[k]))
    n = len(rs)
    print(f"paired {k:14s} median {statistics.median(rs):.3f}  q1 {rs[n//4]:.3f} q3 {rs[3*n//4]:.3f}")
