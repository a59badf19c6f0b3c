import time, numpy as np, torch, statistics, onnxruntime as ort, onnx
from onnx import helper, TensorProto
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
    a=torch.randn(M,K); b=torch.randn(K,N); c=torch.empty(M,N)
    t=bench(lambda: torch.matmul(a,b,out=c), 200 if M<512 else 100)
    g=helper.make_graph([helper.make_node("MatMul",["a","b"],["c"])],"g",
        [helper.make_tensor_value_info("a",TensorProto.FLOAT,[M,K]),helper.make_tensor_value_info("b",TensorProto.FLOAT,[K,N])],
        [helper.make_tensor_value_info("c",TensorProto.FLOAT,[M,N])])
    m=helper.make_model(g, opset_imports=[helper.make_opsetid("",13)], ir_version=9)
    so=ort.SessionOptions(); so.intra_op_num_threads=1
    s=ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    an,bn=a.numpy(),b.numpy()
    t2=bench(lambda: s.run(None,{"a":an,"b":bn}), 200 if M<512 else 100)
    fl=2*M*N*K
    print(M,N,K,"torch1t %.3f ms %.1f GF  ort1t %.3f ms %.1f GF"%(t*1e3,fl/t/1e9,t2*1e3,fl/t2/1e9))
