"""The learned cost model: rank a template's configs from features of their lowered programs,
trained on the record database with a ranking objective (LightGBM's lambdarank).

Features (:func:`features`) come from three places:

- the lowered tensor program (:func:`program_features`): operation counts weighted by the
  trip counts of the loops around them (vector FMAs, loads and stores by buffer kind,
  broadcasts, gathers, branches, loop iterations), loop nesting, the parallel extent, the
  longest serial loop, local buffer sizes, and the arithmetic intensity against the
  parameters and the local buffers. A walk of the IR reads them, so they apply unchanged
  to any template;
- the task: its sizes and the cost of packing its operands;
- the analytic model (:mod:`taskloom.tune.model`): its predicted seconds and their parts.

A model is trained per target from every workload's records (:meth:`CostModel.train`);
records of other shapes, operators and machines rank a task never measured (transfer).
Features are cached in the record database's ``features`` table, so a record is featurized
once. Without LightGBM installed, :func:`load_ranker` gives None and tuning ranks by the
analytic model alone.
"""
from __future__ import annotations

import contextlib
import json
import sqlite3
import warnings
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.dtypes import TensorType
from taskloom.ir.functor import collect
from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program
from taskloom.target.cpu import CpuTarget
from taskloom.ir.arith.simplify_rules import fold_binary
from taskloom.schedule.contraction import DEFAULT_PACK, b_vectorizes, kinds_cost, plain_a_stride
from taskloom.tune.model import predict
from taskloom.tune.records import Records, config_key

_PROGRAM_KEYS = ("fma", "vload_param", "vload_local", "vstore_param", "vstore_local", "gather",
                 "broadcast", "load_param", "load_local", "store_param", "store_local", "branch",
                 "iterations", "depth", "parallel", "longest_serial", "local_bytes", "flops",
                 "param_bytes", "local_traffic", "intensity_param", "intensity_local")
_TASK_KEYS = ("batch", "M", "N", "K", "pack_a", "pack_b", "mr", "nv", "kc", "mc", "nc", "pm", "pn",
              "predicted", "kernel_share", "refetch_share", "pack_share")
FEATURE_NAMES: tuple[str, ...] = tuple(f"program.{k}" for k in _PROGRAM_KEYS) + tuple(f"task.{k}" for k in _TASK_KEYS)


# -- program features ------------------------------------------------------------------

_ADDITIVE = ("fma", "vload_param", "vload_local", "vstore_param", "vstore_local", "gather", "broadcast",
             "load_param", "load_local", "store_param", "store_local", "branch", "iterations")
_SLOT = {k: i for i, k in enumerate(_ADDITIVE)}


class _Walker:
    """Counts what a lowered function executes, each statement weighted by its loops' trips.

    Loop extents and conditions are evaluated on concrete values: a loop whose body's
    extents or conditions depend on its variable (the ragged last block of a blocked loop,
    the first K block that zeroes the accumulators) is walked at its first, a middle and its
    last value; any other loop multiplies its body's counts by its trip count. A statement's
    counts are memoized on the values of the variables its extents read."""

    def __init__(self, fn: S.Function):
        self.params = set(fn.params)
        self.env: dict[E.Var, int] = {}
        self.facts = {"depth": 0.0, "parallel": 0.0, "longest_serial": 0.0, "local_bytes": 0.0}
        self.lanes = 1
        self._deps: dict[int, tuple[E.Var, ...]] = {}
        self._memo: dict[tuple, np.ndarray] = {}
        self._exprs: dict[int, np.ndarray] = {}

    def deps(self, s: S.Stmt) -> tuple[E.Var, ...]:
        """Variables the loop extents, conditions and lets inside ``s`` read, in name order."""
        key = id(s)
        if key not in self._deps:
            out: set[E.Var] = set()
            for node in _stmts(s):
                if isinstance(node, S.For):
                    out |= E.free_vars(node.extent)
                elif isinstance(node, S.If):
                    out |= E.free_vars(node.cond)
                elif isinstance(node, S.Let):
                    out |= E.free_vars(node.value)
            self._deps[key] = tuple(sorted(out, key=lambda v: v.name))
        return self._deps[key]

    def stmt(self, s: S.Stmt, depth: int) -> np.ndarray:
        """Counts of one execution of ``s`` under the current environment."""
        if isinstance(s, S.Let):  # binds a value for what follows: never skipped by the memo
            return self._stmt(s, depth)
        key = (id(s), tuple(self.env.get(v) for v in self.deps(s)))
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._stmt(s, depth)
        return hit

    def _stmt(self, s: S.Stmt, depth: int) -> np.ndarray:
        out = np.zeros(len(_ADDITIVE))
        if isinstance(s, S.SeqStmt):
            bound: list[E.Var] = []
            for x in s.stmts:
                out += self.stmt(x, depth)
                if isinstance(x, S.Let):
                    bound.append(x.var)
            for v in bound:  # a let's scope is the rest of its block
                self.env.pop(v, None)
        elif isinstance(s, S.For):
            n = _evaluate(s.extent, self.env)
            trips = float(max(0, n)) if n is not None else 1.0
            facts = self.facts
            facts["depth"] = max(facts["depth"], depth + 1)
            if s.kind == "parallel":
                facts["parallel"] = max(facts["parallel"], trips)
            elif s.kind == "serial":
                facts["longest_serial"] = max(facts["longest_serial"], trips)
            out[_SLOT["iterations"]] += trips
            if n is not None and n > 0 and s.var in self.deps(s.body):
                # blocked loops differ only in their first (``kb == 0``) and last (the ragged
                # edge) iterations: walk those and one from the middle for the rest
                picks = [(0, 1.0)] if n == 1 else [(0, 1.0), (n - 1, 1.0)] if n == 2 else \
                    [(0, 1.0), (n // 2, float(n - 2)), (n - 1, 1.0)]
                for value, times in picks:
                    self.env[s.var] = value
                    out += times * self.stmt(s.body, depth + 1)
                self.env.pop(s.var, None)
            else:
                out += trips * self.stmt(s.body, depth + 1)
        elif isinstance(s, S.If):
            out[_SLOT["branch"]] += 1
            out += self.expr(s.cond)
            taken = _evaluate(s.cond, self.env)
            if taken is None or taken:
                out += self.stmt(s.then_body, depth)
            if s.else_body is not None and not taken:
                out += self.stmt(s.else_body, depth)
        elif isinstance(s, S.Let):
            out += self.expr(s.value)
            value = _evaluate(s.value, self.env)
            if value is not None:
                self.env[s.var] = value
        elif isinstance(s, S.Declare):
            if isinstance(s.var.type, TensorType):
                size = 1
                for d in s.var.type.shape:
                    size *= int(d.value) if isinstance(d, E.Constant) else 1
                self.facts["local_bytes"] += size * 4
            if s.init is not None:
                out += self.expr(s.init)
        elif isinstance(s, (S.VectorStore, S.BufferStore)):
            vector = isinstance(s, S.VectorStore)
            kind = ("vstore_" if vector else "store_") + ("param" if s.tensor in self.params else "local")
            out[_SLOT[kind]] += 1
            if vector:
                self.lanes = max(self.lanes, getattr(s.value.type, "lanes", 1))
            for i in s.indices:
                out += self.expr(i)
            out += self.expr(s.value)
        elif isinstance(s, S.Assign):
            out += self.expr(s.value)
        elif isinstance(s, S.Evaluate):
            out += self.expr(s.expr)
        return out

    def expr(self, e: E.Expr) -> np.ndarray:
        hit = self._exprs.get(id(e))
        if hit is not None:
            return hit
        out = np.zeros(len(_ADDITIVE))
        for node in collect(e, E.Expr):
            if isinstance(node, E.VectorLoad):
                if node.stride != 1:
                    out[_SLOT["gather"]] += 1
                out[_SLOT["vload_param" if node.tensor in self.params else "vload_local"]] += 1
            elif isinstance(node, E.TensorElement):
                out[_SLOT["load_param" if node.tensor in self.params else "load_local"]] += 1
            elif isinstance(node, E.Broadcast):
                out[_SLOT["broadcast"]] += 1
            elif isinstance(node, E.Call) and node.func == "fma":
                out[_SLOT["fma"]] += 1
                self.lanes = max(self.lanes, getattr(node.type, "lanes", 1))
        self._exprs[id(e)] = out
        return out


def _stmts(s: S.Stmt) -> Iterator[S.Stmt]:
    stack: list[Any] = [s]
    while stack:
        node = stack.pop()
        if isinstance(node, S.Stmt):
            yield node
            stack.extend(c for c in node.children() if isinstance(c, S.Stmt))


def _evaluate(e: E.Expr, env: dict[E.Var, int]) -> int | None:
    """The value of an integer or boolean expression under ``env``, None if it reads
    anything else (a tensor element, an unknown variable)."""
    if isinstance(e, E.Constant):
        return e.value if isinstance(e.value, (int, bool)) else None
    if isinstance(e, E.Var):
        return env.get(e)
    if isinstance(e, E.Binary):
        a, b = _evaluate(e.a, env), _evaluate(e.b, env)
        if a is None or b is None:
            return None
        folded = fold_binary(e.op, E.Constant(a, e.a.type), E.Constant(b, e.b.type))
        return folded.value if isinstance(folded, E.Constant) else None
    if isinstance(e, E.Unary) and e.op in ("neg", "not"):
        a = _evaluate(e.a, env)
        return None if a is None else (-a if e.op == "neg" else (not a))
    if isinstance(e, E.Select):
        c = _evaluate(e.cond, env)
        return None if c is None else _evaluate(e.a if c else e.b, env)
    if isinstance(e, E.Cast) and _is_int(e):
        return _evaluate(e.value, env)
    return None


def _is_int(e: E.Expr) -> bool:
    t = e.type
    return hasattr(t, "is_integer") and t.is_integer()


def program_features(fn: S.Function) -> dict[str, float]:
    """Trip-count-weighted operation counts and loop facts of a lowered function.

    >>> program_features(lower(matmul_program(shape, config, target)))["fma"]
    """
    walker = _Walker(fn)
    counts = walker.stmt(fn.body, 0)
    f = {**dict(zip(_ADDITIVE, counts.tolist())), **walker.facts}
    L = walker.lanes
    f["flops"] = 2.0 * L * f["fma"]
    f["param_bytes"] = 4.0 * (L * (f["vload_param"] + f["vstore_param"]) + f["load_param"] + f["store_param"])
    f["local_traffic"] = 4.0 * (L * (f["vload_local"] + f["vstore_local"]) + f["load_local"] + f["store_local"])
    f["intensity_param"] = f["flops"] / max(1.0, f["param_bytes"])
    f["intensity_local"] = f["flops"] / max(1.0, f["local_traffic"])
    return f


# -- task features and the cache --------------------------------------------------------

def parse_workload(workload: str, target: CpuTarget) -> tuple[tuple[int, int, int, int], tuple[float, float]] | None:
    """``(shape, pack costs on target)`` of a matmul-template workload key, None for other
    keys: ``matmul_cpu/1x64x3136x576/packlane12+lane79/<digest>[/prepacked]`` or
    ``matmul_cpu/1x512x512x512``."""
    from taskloom.ir.dtypes import float32
    parts = workload.split("/")
    if len(parts) < 2 or parts[0] != "matmul_cpu":
        return None
    try:
        shape = tuple(int(x) for x in parts[1].split("x"))
        pack = DEFAULT_PACK
        if len(parts) > 2 and parts[2].startswith("pack"):
            a, b = parts[2][4:].split("+")
            pack = kinds_cost((a, b), target.vector_lanes(float32))
        if parts[-1] == "prepacked":  # B's panels come packed
            pack = (pack[0], 0.0)
    except ValueError:
        return None
    return (shape, pack) if len(shape) == 4 else None  # type: ignore[return-value]


def features(shape: tuple[int, int, int, int], pack: tuple[float, float], config: MatmulConfig,
             target: CpuTarget) -> np.ndarray:
    """The feature vector (:data:`FEATURE_NAMES`) of ``config`` on the task; the program is
    the plain template's (a fused prologue enters through its pack costs), reading B's
    panels when B costs no packing (a ``/prepacked`` workload: a weight packed at compile time)."""
    from taskloom.ir.dtypes import float32
    from taskloom.transforms import lower
    in_place = b_vectorizes(pack, target.vector_lanes(float32))
    prog = program_features(lower(matmul_program(shape, config, target, b_vectorizes=in_place,
                                                 prepacked_b=1 if pack[1] == 0 else 0,
                                                 a_stride=plain_a_stride(shape, pack))))
    pred = predict(shape, config, target, pack=pack)
    total = pred.seconds if pred.ok and pred.seconds > 0 else 1.0
    parts = pred.parts
    task = {"batch": shape[0], "M": shape[1], "N": shape[2], "K": shape[3], "pack_a": pack[0], "pack_b": pack[1],
            **config.to_dict(), "predicted": pred.seconds if pred.ok else 1e3,
            "kernel_share": parts.get("kernel", 0) / total, "refetch_share": parts.get("refetch", 0) / total,
            "pack_share": (parts.get("pack_a", 0) + parts.get("pack_b", 0)) / total}
    values = [prog[k] for k in _PROGRAM_KEYS] + [task[k] for k in _TASK_KEYS]
    # counts span orders of magnitude: trees split their logarithms as well as anything
    return np.log1p(np.maximum(np.asarray(values, dtype=np.float64), 0.0))


_FEATURES_SCHEMA = """
CREATE TABLE IF NOT EXISTS features (
    key TEXT PRIMARY KEY,
    vector TEXT NOT NULL
)
"""


class FeatureCache:
    """Feature vectors in the record database's ``features`` table, keyed by the task, the
    config, the target's vector width and the feature layout."""

    #: Vectors already read or computed in this process, shared by every cache (the
    #: key holds everything a vector depends on, so one table serves every database).
    _memory: dict[str, np.ndarray] = {}

    def __init__(self, records: Records):
        self.path = records.path
        with self._connect() as db:
            db.execute(_FEATURES_SCHEMA)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=60.0)
        try:
            with db:
                yield db
        finally:
            db.close()

    def get_many(self, items: Sequence[tuple[tuple[int, int, int, int], tuple[float, float], MatmulConfig]],
                 target: CpuTarget) -> np.ndarray:
        """The features of every (shape, pack, config) of ``items``, computing the missing ones."""
        layout = f"{len(FEATURE_NAMES)}:{target.vector_bits}:{target.num_vector_registers}"
        keys = [f"{layout}|{'x'.join(map(str, s))}|{p[0]:g}+{p[1]:g}|{config_key(c.to_dict())}" for s, p, c in items]
        missing = [k for k in keys if k not in self._memory]
        if missing:
            with self._connect() as db:
                for k in range(0, len(missing), 500):
                    chunk = missing[k:k + 500]
                    rows = db.execute(f"SELECT key, vector FROM features WHERE key IN ({','.join('?' * len(chunk))})",
                                      chunk).fetchall()
                    self._memory.update((key, np.asarray(json.loads(v))) for key, v in rows)
            new = []
            for key, (s, p, c) in zip(keys, items):
                if key not in self._memory:
                    self._memory[key] = features(s, p, c, target)
                    new.append((key, json.dumps([round(float(x), 6) for x in self._memory[key]])))
            if new:
                with self._connect() as db:
                    db.executemany("INSERT OR REPLACE INTO features (key, vector) VALUES (?, ?)", new)
        return np.stack([self._memory[k] for k in keys]) if keys else np.zeros((0, len(FEATURE_NAMES)))


# -- the ranking model ------------------------------------------------------------------

def load_ranker() -> Any:
    """The ``lightgbm`` module, or None when LightGBM is not installed."""
    try:
        import lightgbm
    except ImportError:
        return None
    return lightgbm


#: Relevance grades of lambdarank: the best of a task gets GRADES, a config twice as slow 0.
GRADES = 16


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rank correlation of two equally long lists (None below 3 points): how
    alike two orders of configs are (a model's and the clock's, or two machines')."""
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def relevance(seconds: np.ndarray) -> np.ndarray:
    """Integer grades of one task's measurements: ``GRADES`` for the fastest, falling linearly
    with the slowdown, 0 from twice the fastest on."""
    slowdown = seconds / seconds.min()
    return np.clip(np.round(GRADES * (2.0 - slowdown)), 0, GRADES).astype(int)


@dataclass
class TrainingSet:
    """Feature rows grouped by task, with their measured seconds."""

    X: np.ndarray
    seconds: np.ndarray
    groups: list[int]
    workloads: list[str]


def training_set(records: Records, target: CpuTarget, *, exclude: str | None = None,
                 any_target: bool = False, cache: FeatureCache | None = None,
                 pool: int | None = 48) -> TrainingSet:
    """Every successful record of a matmul-template workload on ``target`` (on any target
    with ``any_target``), except workload ``exclude``, featurized and grouped by workload.
    With ``pool``, only each task's configs among the analytic model's best ``pool`` are
    kept: that is where tuning asks the model to decide, and it bounds the featurizing."""
    cache = cache or FeatureCache(records)
    rows = records.records(target=None if any_target else target.key())
    by_task: dict[tuple[str, str], list[tuple[MatmulConfig, float]]] = {}
    for r in rows:
        if r.seconds is None or r.error is not None or r.workload == exclude:
            continue
        if parse_workload(r.workload, target) is None:
            continue
        try:
            c = MatmulConfig.from_dict(r.config)
        except (KeyError, TypeError, ValueError):
            continue
        by_task.setdefault((r.workload, r.target), []).append((c, r.seconds))
    Xs, ys, groups, names = [], [], [], []
    for (workload, _), measured in sorted(by_task.items()):
        if len(measured) < 2:
            continue  # one point ranks nothing
        shape, pack = parse_workload(workload, target)  # type: ignore[misc]
        if pool is not None:
            from taskloom.tune.model import rank
            top = {c for c, _ in rank(shape, target, pack=pack)[:pool]}
            measured = [(c, s) for c, s in measured if c in top]
            if len(measured) < 2:
                continue
        Xs.append(cache.get_many([(shape, pack, c) for c, _ in measured], target))
        ys.append(np.asarray([s for _, s in measured]))
        groups.append(len(measured))
        names.append(workload)
    if not Xs:
        return TrainingSet(np.zeros((0, len(FEATURE_NAMES))), np.zeros(0), [], [])
    return TrainingSet(np.concatenate(Xs), np.concatenate(ys), groups, names)


def blended_ranks(analytic: Sequence[int], scores: np.ndarray) -> list[int]:
    """Indices ``0 .. len(scores) - 1`` by the sum of their analytic rank (``analytic[i]``) and
    learned rank (higher ``scores`` first, ties to the lower index), ties to the analytic
    rank: the learned ranking and the analytic one are each wrong in their own way, and their
    mean rank is steadier than either."""
    learned = {i: r for r, i in enumerate(sorted(range(len(scores)), key=lambda i: -scores[i]))}
    return sorted(range(len(scores)), key=lambda i: (learned[i] + analytic[i], analytic[i]))


class CostModel:
    """A LightGBM lambdarank model over :data:`FEATURE_NAMES` (or ``feature_names``, the GPU
    ranker's); higher scores rank faster."""

    def __init__(self, seed: int = 0, feature_names: Sequence[str] = FEATURE_NAMES):
        lgb = load_ranker()
        if lgb is None:
            raise ImportError("the learned cost model needs LightGBM: pip install 'taskloom[tune]'")
        self._lgb = lgb
        self.seed = seed
        self.feature_names = list(feature_names)
        self.model: Any = None

    @property
    def trained(self) -> bool:
        return self.model is not None

    def fit(self, data: TrainingSet) -> "CostModel":
        """Train on ``data`` (at least one task with two measurements), replacing what was learned."""
        if not data.groups:
            self.model = None
            return self
        labels = np.concatenate([relevance(data.seconds[s:s + n])
                                 for s, n in zip(np.cumsum([0, *data.groups[:-1]]), data.groups)])
        params = {"objective": "lambdarank", "learning_rate": 0.08, "num_leaves": 15,
                  "min_data_in_leaf": 3, "label_gain": list(range(GRADES + 1)), "seed": self.seed,
                  "deterministic": True, "num_threads": 1, "verbose": -1}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            train = self._lgb.Dataset(data.X, labels, group=data.groups, feature_name=self.feature_names,
                                      params={"verbose": -1})
            self.model = self._lgb.train(params, train, num_boost_round=150)
        return self

    def scores(self, X: np.ndarray) -> np.ndarray:
        """Higher is predicted faster; zeros while untrained."""
        if self.model is None or len(X) == 0:
            return np.zeros(len(X))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asarray(self.model.predict(X), dtype=np.float64)
