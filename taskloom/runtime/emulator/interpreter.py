"""Statements compiled once into closures ``f(machine, mask)``; control flow is masking.

- ``if``: each branch runs on the lanes that take it, skipped when there are none; a
  condition every lane shares picks one branch.
- ``for``: a trip count every lane shares is a Python loop; per-lane trip counts run while
  any lane is still in the loop, each iteration on the lanes still in it.
- ``let`` binds for every lane; an assignment changes the active lanes only.
- A barrier is where the blocks' threads meet: checked (every thread of a block, or none),
  counted, and the end of a race-checking interval.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.functor import collect
from taskloom.ir.dtypes import DataType, TensorType, VectorType
from taskloom.runtime.emulator import checks, cp_async, memory, mma, proxies, tma, values, wgmma
from taskloom.runtime.emulator.exprs import ExprCompiler, instruction_class, lookup
from taskloom.runtime.emulator.machine import Machine, Mask

Run = Callable[[Machine, Mask], None]


def _nothing(st: Machine, m: Mask) -> None:
    return None


def scoped(body: Run) -> Run:
    """``body`` as a C block: what it declares is gone after it."""
    def f(st: Machine, m: Mask) -> None:
        st.enter()
        body(st, m)
        st.leave()
    return f


class StmtCompiler(ExprCompiler):
    #: the kernel's TMA descriptors by name (set by Program)
    tensor_maps: dict[str, gpu.TensorMap] = {}

    def stmt(self, s: S.Stmt) -> Run:
        method = getattr(self, "s_" + type(s).__name__, None)
        if method is None:
            raise self.unsupported(s)
        return method(s)

    def ref(self, e: E.TensorElement, what: str) -> tuple[str, Callable]:
        name, _, fi = self.buffer_of(e.tensor, e.indices, what)
        return name, fi

    # ---- structure
    def s_SeqStmt(self, s: S.SeqStmt) -> Run:
        parts = [self.stmt(x) for x in s.stmts]
        parts = [p for p in parts if p is not _nothing]

        def f(st: Machine, m: Mask) -> None:
            for p in parts:
                p(st, m)
        return f

    def s_Comment(self, s: S.Comment) -> Run:
        return _nothing

    def s_Prefetch(self, s: S.Prefetch) -> Run:
        return _nothing  # a hint: it never faults and changes nothing

    def s_Evaluate(self, s: S.Evaluate) -> Run:
        fe = self.expr(s.expr)

        def f(st: Machine, m: Mask) -> None:
            fe(st, m)
        return f

    def s_ForMapping(self, s: S.ForMapping) -> Run:
        raise self.error("a task-mapping loop is not lowered; run taskloom.transforms.lower first")

    def s_For(self, s: S.For) -> Run:
        if s.kind == "parallel":
            raise self.error(f"loop '{s.var.name}' is a parallel (CPU) loop; a CUDA kernel's workers are its threads")
        name, dtype = s.var.name, s.var.type.numpy  # type: ignore[union-attr]
        fe, body = self.expr(s.extent), scoped(self.stmt(s.body))

        def f(st: Machine, m: Mask) -> None:
            n = fe(st, m)
            st.enter()
            st.bind(name, None)
            if n.shape[0] == 1:
                for k in range(int(n[0])):
                    st.env[name] = np.array([k], dtype=dtype)
                    body(st, m)
            else:
                k = 0
                while True:
                    inside = m & (n > k)
                    if not inside.any:
                        break
                    st.env[name] = np.array([k], dtype=dtype)
                    body(st, m if inside.count == m.count else inside)
                    k += 1
            st.leave()
        return f

    def s_If(self, s: S.If) -> Run:
        fc, then = self.expr(s.cond), scoped(self.stmt(s.then_body))
        other = scoped(self.stmt(s.else_body)) if s.else_body is not None else None

        def f(st: Machine, m: Mask) -> None:
            c = fc(st, m)
            if c.shape[0] == 1:
                if c[0]:
                    then(st, m)
                elif other is not None:
                    other(st, m)
                return
            yes = m & c
            if yes.any:
                then(st, m if yes.count == m.count else yes)
            if other is not None and yes.count < m.count:
                other(st, m & ~c)
        return f

    # ---- variables
    def s_Let(self, s: S.Let) -> Run:
        name, fv = s.var.name, self.expr(s.value)

        def f(st: Machine, m: Mask) -> None:
            st.bind(name, fv(st, m))
        return f

    def s_Declare(self, s: S.Declare) -> Run:
        t = s.var.type
        if isinstance(t, TensorType):
            return self.declare_buffer(s)
        name = s.var.name
        if s.init is not None:
            fv = self.expr(s.init)
            return lambda st, m: st.bind(name, fv(st, m))
        base = values.scalar_of(t)  # C leaves it uninitialized: garbage, as a fresh buffer holds
        junk = values.to_value(memory.garbage(base, 1), base)
        junk = np.repeat(junk[:, None], t.lanes, axis=1) if isinstance(t, VectorType) else junk
        return lambda st, m: st.bind(name, junk)

    def declare_buffer(self, s: S.Declare) -> Run:
        t, name, scope = s.var.type, s.var.name, s.scope
        if scope == "global":
            raise self.error(f"buffer '{name}' is declared in global scope; a CUDA kernel gets global memory "
                             "as a parameter")
        if not isinstance(t.dtype, DataType):  # type: ignore[union-attr]
            raise self.error(f"buffer '{name}' holds {t.dtype!r} vectors; "  # type: ignore[union-attr]
                             "the emulator runs buffers of scalars")
        dims = [self.expr(d) for d in t.shape]  # type: ignore[union-attr]
        kind = "shared" if scope == "shared" else "register"
        key = id(s)

        def f(st: Machine, m: Mask) -> None:
            buf = st.static.get(key)
            if buf is None:  # storage is static, as C's arrays are: declared once, kept
                size = int(np.prod([int(d(st, m)[0]) for d in dims]))
                buf = st.static[key] = memory.new_buffer(st, name, kind, t.dtype, size)  # type: ignore[union-attr]
                if kind == "shared":
                    st.shared.append(buf)
            st.bufs[name] = buf
        return f

    def s_Assign(self, s: S.Assign) -> Run:
        name, fv = s.var.name, self.expr(s.value)

        error = self.error(f"'{name}' is assigned before it is declared")

        def f(st: Machine, m: Mask) -> None:
            v = fv(st, m)
            old = st.env.get(name)
            if old is None:
                raise error
            # the inactive lanes keep their value; with every thread active nothing is kept
            st.env[name] = v if m.full else np.where(m.m if v.ndim == 1 else m.m[:, None], v, old)
        return f

    # ---- memory
    def s_BufferStore(self, s: S.BufferStore) -> Run:
        name, dtype, fi = self.buffer_of(s.tensor, s.indices, "a store")
        fv = self.expr(s.value)

        def f(st: Machine, m: Mask) -> None:
            buf = lookup(st, name, self)
            kind = instruction_class(buf.scope, "store")
            if kind:
                st.count(kind, m)
            v = values.to_stored(fv(st, m), dtype)
            memory.store(st, buf, fi(st, m)[:, None], v[:, None], m)
        return f

    def s_VectorStore(self, s: S.VectorStore) -> Run:
        name, dtype, fi = self.buffer_of(s.tensor, s.indices, "a vector store")
        fv, lanes = self.expr(s.value), np.arange(s.value.type.lanes)  # type: ignore[union-attr]
        fcount = None if s.count is None else self.expr(s.count)

        def f(st: Machine, m: Mask) -> None:
            buf = lookup(st, name, self)
            kind = instruction_class(buf.scope, "store")
            if kind:
                st.count(kind, m)
            ok = None if fcount is None else lanes < fcount(st, m)[:, None]
            v = values.to_stored(fv(st, m), dtype)
            memory.store(st, buf, fi(st, m)[:, None] + lanes, v, m, ok)
        return f

    def s_Barrier(self, s: S.Barrier) -> Run:
        def f(st: Machine, m: Mask) -> None:
            if st.check:
                checks.check_barrier(st, m)
            st.count("barrier", m)
            arrived = m.m.reshape(st.nblocks, st.padded).any(axis=1)
            st.counters.barriers += int(np.count_nonzero(arrived))
            for buf in st.shared:
                if buf.races is not None:
                    buf.races.reset(arrived)
        return f

    # ---- the GPU statements
    def s_AtomicAdd(self, s: gpu.AtomicAdd) -> Run:
        name, fi = self.ref(s.ref, "an atomic add")
        fv, dtype = self.expr(s.value), s.ref.type

        def f(st: Machine, m: Mask) -> None:
            st.count("atomic", m)
            v = values.to_stored(fv(st, m), dtype) if dtype.name != "bfloat16" else fv(st, m)
            memory.atomic_add(st, lookup(st, name, self), fi(st, m)[:, None], v, m)
        return f

    def s_VectorCopy(self, s: gpu.VectorCopy) -> Run:
        dst, fd = self.ref(s.dst, "copy_vector's destination")
        src, fs = self.ref(s.src, "copy_vector's source")
        nbytes, lanes = s.nbytes, np.arange(s.nbytes // s.dst.type.nbytes)

        def f(st: Machine, m: Mask) -> None:
            d, r = lookup(st, dst, self), lookup(st, src, self)
            di, si = fd(st, m), fs(st, m)
            for buf, idx, kind, way in ((r, si, "load", "from"), (d, di, "store", "into")):
                if st.check:
                    memory.check_aligned(st, buf, idx, nbytes, m, f"copies {nbytes} bytes at once {way}")
                if instruction_class(buf.scope, kind):
                    st.count(instruction_class(buf.scope, kind), m)  # type: ignore[arg-type]
            data = memory.load(st, r, st.full(si)[:, None] + lanes, m, None, "copies from")
            memory.store(st, d, st.full(di)[:, None] + lanes, data, m, None, "copies into")
        return f

    def s_CpAsync(self, s: gpu.CpAsync) -> Run:
        dst, fd = self.ref(s.dst, "cp_async's destination")
        src, fs = self.ref(s.src, "cp_async's source")
        fb = None if s.src_bytes is None else self.expr(s.src_bytes)
        nbytes = s.nbytes

        def f(st: Machine, m: Mask) -> None:
            cp_async.issue(st, lookup(st, dst, self), fd(st, m), lookup(st, src, self), fs(st, m), nbytes,
                           None if fb is None else fb(st, m), m)
        return f

    def s_CpAsyncCommit(self, s: gpu.CpAsyncCommit) -> Run:
        return lambda st, m: cp_async.commit(st, m)

    def s_CpAsyncWait(self, s: gpu.CpAsyncWait) -> Run:
        pending = s.pending
        return lambda st, m: cp_async.wait(st, pending, m)

    def s_Ldmatrix(self, s: gpu.Ldmatrix) -> Run:
        dst, fd = self.ref(s.dst, "ldmatrix's destination")
        src, fs = self.ref(s.src, "ldmatrix's source")
        num, trans = s.num, s.trans

        def f(st: Machine, m: Mask) -> None:
            mma.ldmatrix(st, lookup(st, dst, self), fd(st, m), lookup(st, src, self), fs(st, m), num, trans, m)
        return f

    def s_MmaSync(self, s: gpu.MmaSync) -> Run:
        refs = [self.ref(r, f"mma_sync's {w} fragment") for r, w in
                ((s.d, "D"), (s.a, "A"), (s.b, "B"), (s.c, "C"))]
        shape = s.shape

        def f(st: Machine, m: Mask) -> None:
            d, a, b, c = ((lookup(st, name, self), fi(st, m)) for name, fi in refs)
            mma.mma_sync(st, d, a, b, c, m, shape)
        return f

    def s_Wgmma(self, s: gpu.Wgmma) -> Run:
        refs = [self.ref(r, f"wgmma's {w}") for r, w in ((s.d, "accumulators"), (s.a, "A operand"), (s.b, "B operand"))]
        n, majors, offsets = gpu.wgmma_n(s.shape), (s.a_major, s.b_major), (s.a_lbo, s.a_sbo, s.b_lbo, s.b_sbo)

        def f(st: Machine, m: Mask) -> None:
            d, a, b = ((lookup(st, name, self), fi(st, m)) for name, fi in refs)
            wgmma.issue(st, d, a, b, n, majors, offsets, m)
        return f

    def s_WgmmaFence(self, s: gpu.WgmmaFence) -> Run:
        name = s.acc.name

        def f(st: Machine, m: Mask) -> None:
            st.count("fence", m)
            if st.proxies is not None and name in st.bufs:
                proxies.fence_registers(st, lookup(st, name, self), m)
        return f

    def s_WgmmaCommit(self, s: gpu.WgmmaCommit) -> Run:
        return lambda st, m: wgmma.commit(st, m)

    def s_WgmmaWait(self, s: gpu.WgmmaWait) -> Run:
        pending = s.pending
        return lambda st, m: wgmma.wait(st, pending, m)

    def s_FenceProxyAsync(self, s: gpu.FenceProxyAsync) -> Run:
        def f(st: Machine, m: Mask) -> None:
            st.count("fence", m)
            if st.proxies is not None:
                proxies.fence_shared(st, m)
        return f

    def s_FenceMbarrierInit(self, s: gpu.FenceMbarrierInit) -> Run:
        return lambda st, m: st.count("fence", m)

    def _on_barrier(self, bar: E.TensorElement, what: str, act: Callable) -> Run:
        """A statement on an mbarrier: ``act(st, buffer, index, mask)``."""
        name, fi = self.ref(bar, f"{what}'s barrier")

        def f(st: Machine, m: Mask) -> None:
            st.count("mbarrier", m)
            act(st, lookup(st, name, self), fi(st, m), m)
        return f

    def s_MbarrierInit(self, s: gpu.MbarrierInit) -> Run:
        count = s.count
        return self._on_barrier(s.bar, "mbarrier_init", lambda st, b, i, m: tma.init(st, b, i, count, m))

    def s_MbarrierExpectTx(self, s: gpu.MbarrierExpectTx) -> Run:
        nbytes = s.nbytes
        return self._on_barrier(s.bar, "mbarrier_expect_tx", lambda st, b, i, m: tma.expect_tx(st, b, i, nbytes, m))

    def s_MbarrierWait(self, s: gpu.MbarrierWait) -> Run:
        phase = self.expr(s.phase)
        return self._on_barrier(s.bar, "mbarrier_wait", lambda st, b, i, m: tma.wait(st, b, i, phase(st, m), m))

    def s_MbarrierArrive(self, s: gpu.MbarrierArrive) -> Run:
        return self._on_barrier(s.bar, "mbarrier_arrive", tma.arrive)

    def s_WarpSpecialized(self, s: gpu.WarpSpecialized) -> Run:
        """The two roles' steps interleaved as the mbarriers allow: the producers run ahead
        as far as their waits let them (so that a copy that would overwrite what a wgmma
        still reads is caught), then the consumers take a step; a state where neither role
        can go on is the device's hang, an error."""
        name, dtype = s.var.name, s.var.type.numpy  # type: ignore[union-attr]
        fsteps, fproducer, fleader = self.expr(s.steps), self.expr(s.producer), self.expr(s.leader)
        setup, finish = scoped(self.stmt(s.consumer_setup)), scoped(self.stmt(s.consumer_finish))
        roles = []
        for w, step in ((s.producer_wait, s.producer_step), (s.consumer_wait, s.consumer_step)):
            bar, fi = self.ref(w.bar, "a role's mbarrier_wait")
            roles.append((bar, fi, self.expr(w.phase), scoped(self.stmt(step))))

        def f(st: Machine, m: Mask) -> None:
            steps = int(fsteps(st, m)[0])
            producers = m & st.full(fproducer(st, m)).astype(bool)
            masks = (producers & st.full(fleader(st, m)).astype(bool), m & ~producers.m)
            done = [0 if mk.any else steps for mk in masks]
            if masks[1].any:
                setup(st, masks[1])
            st.enter()
            st.bind(name, None)
            while min(done) < steps:
                for r, ((bar, fi, fphase, body), mk) in enumerate(zip(roles, masks)):
                    st.env[name] = np.array([done[r]], dtype=dtype)
                    if done[r] < steps and tma.ready(st, lookup(st, bar, self), fi(st, mk), fphase(st, mk), mk):
                        st.count("mbarrier", mk)
                        body(st, mk)
                        done[r] += 1
                        break
                else:
                    raise checks.EmulatorError(
                        f"kernel '{st.kernel}': the producers (step {done[0]}) and the consumers (step {done[1]}) "
                        f"of {steps} steps each wait on an mbarrier that only the other could complete after "
                        "its wait: the device would hang")
            st.leave()
            if masks[1].any:
                finish(st, masks[1])
        return f

    def s_TmaLoad(self, s: gpu.TmaLoad) -> Run:
        if s.tmap not in self.tensor_maps:
            raise self.error(f"tma_load names tensor map '{s.tmap}', which the kernel does not declare")
        tmap = self.tensor_maps[s.tmap]
        dst, fd = self.ref(s.dst, "tma_load's destination")
        bar, fb = self.ref(s.bar, "tma_load's barrier")
        coords = [self.expr(c) for c in s.coords]

        def f(st: Machine, m: Mask) -> None:
            if not m.any:
                return
            tma.load(st, lookup(st, dst, self), fd(st, m), lookup(st, tmap.tensor, self), tmap,
                     [c(st, m) for c in coords], lookup(st, bar, self), fb(st, m), m)
        return f


class Program:
    """A ``cuda_kernel`` compiled for the emulator: :meth:`run` executes it on a Machine."""

    def __init__(self, fn: S.Function):
        self.fn = fn
        compiler = StmtCompiler(fn.name)
        compiler.tensor_maps = {t.name: t for t in gpu.tensor_maps(fn)}
        self.body = compiler.stmt(fn.body)
        # the accumulators of the kernel's wgmmas, whose fences are checked
        self.accumulators = frozenset(w.d.tensor.name for w in collect(fn.body, gpu.Wgmma))

    def run(self, st: Machine) -> None:
        if st.check and self.accumulators:
            st.proxies = self.accumulators
        self.body(st, st.top)
