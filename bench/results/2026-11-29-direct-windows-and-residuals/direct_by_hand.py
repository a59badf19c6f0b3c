"""The hand-written window kernel of direct_by_hand.c (3x3, 64 -> 64 channels, 56x56, batch 8,
NHWC input padded ahead), built with 1, 3 and 9 taps per K block, checked against torch and
timed in rotating rounds: how long a K block a window read in place wants.

    python direct_by_hand.py
"""
import ctypes, os, subprocess, tempfile, time
import numpy as np, torch

here = os.path.dirname(os.path.abspath(__file__))
work = tempfile.mkdtemp()
P = ctypes.c_void_p
fs = {}
for taps in (1, 3, 9):
    lib = os.path.join(work, f"direct{taps}.so")
    subprocess.run(["gcc", "-O3", "-fopenmp", "-shared", "-fPIC", "-std=gnu11", "-march=native", f"-DTAPS={taps}",
                    "-o", lib, os.path.join(here, "direct_by_hand.c")], check=True)
    f = ctypes.CDLL(lib).direct
    f.argtypes = [P] * 4 + [ctypes.c_int]
    fs[f"{taps} taps a block"] = f
rng = np.random.default_rng(0)
x = rng.random((8, 56, 56, 64), dtype=np.float32)
xp = np.zeros((8, 58, 58, 64), np.float32); xp[:, 1:57, 1:57] = x
bias, B = rng.random(64, dtype=np.float32), rng.random((576, 64), dtype=np.float32)
out = np.zeros((8, 56, 56, 64), np.float32)
ref = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(B.reshape(3, 3, 64, 64)).permute(3, 2, 0, 1),
                                 torch.from_numpy(bias), padding=1).relu().permute(0, 2, 3, 1).numpy()
p = lambda a: a.ctypes.data  # noqa: E731
for name, f in fs.items():
    f(p(xp), p(bias), p(B), p(out), 8)
    print(name, "max relative difference from torch", float(np.abs(out - ref).max() / np.abs(ref).max()))
for r in range(3):
    ms = {}
    for name, f in fs.items():
        ts = []
        for _ in range(40):
            t = time.perf_counter(); f(p(xp), p(bias), p(B), p(out), 8); ts.append(time.perf_counter() - t)
        ms[name] = 1e3 * np.median(ts)
    print("round", r, "  ".join(f"{n}: {v:.3f} ms" for n, v in ms.items()))
