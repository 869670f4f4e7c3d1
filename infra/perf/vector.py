"""Open-loop predictions of many aggregated deployments at once: `serving.open_loop_agg`, vectorised with numpy.

    predict_open_agg([(worker, role, workload), ...]) == [open_loop_agg(worker, role, workload), ...]

A planner that sweeps rates, lengths and layouts asks the serving model for thousands of predictions; the scalar
path prices each with a few dozen engine steps inside nested solvers, at 100-300 us a call. Here every case is one
element of a set of arrays, and each function mirrors the scalar one of the same name (`_mixed_step` mirrors
`serving._mixed_step`, `_Pricer` the step closure `arch._stepper` builds) over all the cases at once:
- a worker's step coefficients are the values `_stepper`'s closure holds (`Worker.step_terms`), packed
  into arrays once per distinct worker, so the vector step prices each case with that case's own worker;
- branches become masks, and `max(a, b)` / `min(a, b)` become np.maximum / np.minimum where neither side can be
  NaN (elsewhere `np.where` keeps Python's choice of operand);
- every iterative solver (`least_fixed_point`, `regula_falsi`, `_wandering_sd`'s doubling, Erlang C's recursion)
  runs in lockstep over the elements still iterating, with each element's own starting point, stopping test and
  Illinois halving, so it visits exactly the points its scalar run visits; elements that turn out unstable leave
  with the scalar path's `_unstable` result at the check where the scalar path returns it.

Every float operation keeps the scalar code's order, and numpy's +, -, *, /, sqrt round as Python's do, so the
results are the scalar ones bit for bit, except where numpy's SIMD exp, log, expm1 and log1p round the last bit
differently from the C library's (they are used as they come: they run inside the step and the solvers). What
Python computes with the C library's `pow` (`x ** 2` among it), `hypot` and `erf`, which numpy rounds differently
or lacks, is computed element by element with Python's own, once per case and never inside a solver.

Speed comes from few numpy calls over many elements, so the code avoids what costs more than the arithmetic:
- `_Cases`, the struct of arrays, gathers a field for a selection of its elements only when it is read, and a
  solver keeps finished elements in its frame (evaluated, their values dropped) until they are the majority;
- a step at fixed decodes and contexts is priced for many prompt sizes from its terms computed once (`_Pricer`);
- where a solver is down to a handful of elements, the scalar step and `serving._mixed_step` themselves run them
  one by one (`_FEW`): numpy's cost per call is then larger than the scalar computation.
"""

from __future__ import annotations

import math
from collections import namedtuple
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from itertools import chain, repeat
from types import EllipsisType

import numpy as np

from infra.perf import serving
from infra.perf.arch import GB, Worker
from infra.perf.heap import collector_paused, dict_maker, maker
from infra.perf.serving import _CHUNK_Z, _PHI, CHUNK_POINTS, PERCENTILES, Prediction, z_of
from infra.perf.shape import Role, Workload

_KEYS = ("mean", *PERCENTILES)
_percentiles = dict_maker(_KEYS)
_Q = tuple(float(p[1:]) / 100 for p in PERCENTILES)
"""Each percentile as a probability, computed as the scalar code computes it."""
_TAIL = tuple(1 - q for q in _Q)
_Z = tuple(z_of(p) for p in PERCENTILES)
_Z_UP = tuple(max(z, 0.0) for z in _Z)
"""`max(z_of(p), 0.0)`: the tails of the batch and of the arrivals take no lower percentiles than the median."""
_CDF_TAIL = tuple(1 - _PHI.cdf(z) for z in _Z_UP)
"""`_arrivals_quantile`'s `tail` at each percentile (it depends on the percentile alone)."""
_SQRT_2PI = math.sqrt(2 * math.pi)
_SQRT_2 = math.sqrt(2)
_SQRT_PI = math.sqrt(math.pi)
_NO_SLOTS = 1 << 30
"""`role.batch_cap or 1 << 30`, and what `max_sequences` gives a worker that keeps no per-sequence state."""

_STEP_TERMS = ("width_k", "dense_fl", "logit_fl", "gemm_s", "dense_read", "experts", "experts_local", "active", "dp",
               "miss", "expert_fl", "expert_bytes", "mem_s", "moe_token", "expert_step", "qk_scale", "topk",
               "window", "attn_qk", "swa_qk", "index_qk", "kv_index", "kv_main", "kv_swa", "state", "attn_flops_s",
               "bw", "attn_eff", "ar_fixed", "ar_token", "a2a_fixed", "a2a_token", "elem", "pp", "fixed", "tile")
"""The coefficients `arch._stepper`'s closure prices a step with (its flags `ar`, `a2a` and `sparse` aside)."""
_EXPERT_TERMS = ("experts_local", "active", "miss", "expert_fl", "expert_bytes", "moe_token", "expert_step", "tile")
"""The step coefficients of routed experts, all 0 for a dense worker."""
_WORKER_TERMS = ("accept", "request_s", "hold_steps", "kv_full", "kv_swa_token", "state_bytes", "kv_gb", "queue")
"""What the serving model reads from a worker besides its step: factors, per-request latency, memory."""
_CASE_TERMS = ("isl", "osl", "rate", "arrival_cv", "isl_cv", "osl_cv", "prefix_hit", "peers", "batch_cap",
               "workers", "chunk")
"""What it reads from a workload and a role (`batch_cap` and `workers` with their defaults, `chunk` the step's
token budget)."""
_OPTIONAL = {"experts": ("experts",), "swa_qk": ("swa_qk",), "index_qk": ("index_qk",), "kv_index": ("kv_index",),
             "kv_swa": ("kv_swa",), "state": ("state",), "ar": ("ar_fixed", "ar_token"),
             "a2a": ("a2a_fixed", "a2a_token")}
"""Step terms a batch may lack altogether (by the coefficients that are 0 without them): the step then leaves them
out, as the scalar closure does for a worker without them; where only some cases have them, the others add exact
zeros. Sparse attention is there when some worker's top-k is below 1e18."""

_STABLE, _NO_FIT, _OVER, _WALL, _SLOTS, _GROWING = range(6)
_NOTES = {
    _NO_FIT: "one request does not fit the KV cache",
    _OVER: "arrival rate exceeds what the replicas sustain",
    _WALL: "prompts arrive faster than full steps (max_num_tokens {chunk}, less the decoding sequences' tokens) "
           "take them",
    _SLOTS: "arrival rate exceeds what the batch slots sustain",
    _GROWING: "arrival rate is past the point where the batch keeps growing",
}
"""The notes of `open_loop_agg`'s unstable results, word for word."""


class _Cases:
    """Struct of arrays: one element per case (or per case and point) being solved, each field an array over the
    elements (or with the elements on its last axis). `take` selects elements lazily: a field is gathered from the
    parent the first time it is read. Fields set on a selection belong to it and to its own selections.

    Gathering a field costs several times what a step's arithmetic on it does, so the solvers gather rarely: they
    keep finished elements in their selection (evaluated, their values dropped) until those are the majority."""

    def __init__(self, parent: _Cases | None = None, idx: np.ndarray | None = None, n: int = 0,
                 terms: frozenset[str] = frozenset(), expm1: Callable[[np.ndarray], np.ndarray] = np.expm1) -> None:
        self._parent = parent
        self._idx = idx
        self.n = n if parent is None else parent.n if idx is None else idx.size
        """How many elements."""
        self.terms = parent.terms if parent is not None else terms
        """The optional step terms some case in the batch has (see `_OPTIONAL`)."""
        self.expm1 = parent.expm1 if parent is not None else expm1
        """The expm1 the step's expert term takes (numpy's, or the C library's as the scalar step's)."""

    def __getattr__(self, name: str) -> np.ndarray:
        parent = self.__dict__.get("_parent")
        if parent is None or name.startswith("_"):
            raise AttributeError(name)
        value = getattr(parent, name)
        idx = self._idx
        if idx is not None:
            value = value[idx] if value.ndim == 1 else value.take(idx, axis=-1)
        self.__dict__[name] = value
        return value

    def take(self, idx: np.ndarray | None) -> _Cases:
        """The elements at `idx` (all of them, as a view to set fields on, when None)."""
        return _Cases(self, idx)

    @property
    def k(self) -> _StepTerms:
        """The step coefficients of each element's worker, by name (rows of the packed `coef`)."""
        k = self.__dict__.get("_k")
        if k is None:
            k = self.__dict__["_k"] = _StepTerms._make(self.coef)
        return k


_StepTerms = namedtuple("_StepTerms", _STEP_TERMS)


def _part(c: _Cases, mask: np.ndarray) -> tuple[_Cases, np.ndarray | EllipsisType]:
    """Cases to compute the elements under `mask` on, and which of the mask's elements those are (`...` for all):
    a gathered selection when they are a minority of a 1-d mask, else all of `c` (a step costs less than
    gathering the fields it reads, so for a majority the others are computed too and their results dropped)."""
    if mask.ndim > 1 or 2 * np.count_nonzero(mask) > mask.size:
        return c.take(None), ...
    idx = np.flatnonzero(mask)
    return c.take(idx), idx


def _narrow(live: np.ndarray, c: _Cases, pos: np.ndarray, *state: np.ndarray) -> tuple:
    """A solver's frame (cases `c` at positions `pos` of its elements, `live` those still iterating, and its
    `state` arrays over them) without the finished elements once those are the majority; unchanged until then.
    The solvers set `live` on the frame for the function they evaluate: the others' values are dropped, and a
    function with a side effect (`open_loop_agg`'s `walled`) confines it to the live ones."""
    if 2 * np.count_nonzero(live) >= live.size:
        return (live, c, pos, *state)
    keep = np.flatnonzero(live)
    return (live[keep], c.take(keep), pos[keep], *(a[keep] for a in state))


def _py(fn: Callable[..., float], *args: np.ndarray | float) -> np.ndarray:
    """`fn` applied element by element with Python floats: for `pow`, `math.hypot` and `math.erf`, which numpy
    rounds differently from the C library (or lacks). Used once per case, never inside a solver."""
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    shape = arrays[0].shape
    lists = [a.ravel().tolist() if isinstance(a, np.ndarray) else repeat(a) for a in args]
    return np.fromiter(map(fn, *lists), float, count=arrays[0].size).reshape(shape)


def _expm1(x: np.ndarray) -> np.ndarray:
    """`math.expm1` of each element: the C library's, as the scalar step takes it, where numpy's may round the last
    bit otherwise. Two kinds of argument need no call: 0 (a dense worker's expert term: its rate of missing an
    expert is 0), where it is 0, and below -40 (a step's prompt tokens touching every expert), where e^x is under
    a tenth of the last bit of -1 and the C library returns -1 exactly (glibc's for any x below -56 ln 2); only the
    others go through Python floats."""
    out = np.zeros_like(x)
    far = x < -40.0
    out[far] = -1.0
    some = (x != 0) & ~far
    out[some] = _py(math.expm1, x[some])
    return out


def _square(x: np.ndarray) -> np.ndarray:
    """`x ** 2` as Python computes it: C's pow(), which does not always round as x * x does (0 at 0)."""
    out = np.zeros_like(x)
    some = x != 0
    out[some] = _py(pow, x[some], 2)
    return out


def _hypot(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """`math.hypot(x, y)`, which is |x| or |y| where the other is 0 (taken without calling it there)."""
    out = np.where(x == 0, np.abs(y), np.abs(x))
    both = (x != 0) & (y != 0)
    out[both] = _py(math.hypot, x[both], y[both])
    return out


_FEW = 32
"""Elements up to which `_mixed_step` runs `serving._mixed_step` element by element: a vector mixed step is a few
hundred numpy calls, which for so few elements take longer than the scalar function (the solvers' last
iterations often have no more)."""
_FEW_STEPS = 8
"""Elements up to which `_step` runs each worker's own step closure (a vector step is some 60 numpy calls)."""


def _one_by_one(c: _Cases, fn: Callable[..., float], *args) -> np.ndarray:
    """`fn(worker, *args)` for each element's worker and arguments (numbers, or arrays over the elements or
    broadcast to (j, n)): the scalar code itself, for a few elements."""
    shape = np.broadcast_shapes(*(np.shape(a) for a in args), (c.n,))
    if not c.n:
        return np.empty(shape)
    workers = c.worker.tolist() * (math.prod(shape) // c.n)
    flat = [repeat(a) if np.ndim(a) == 0 else np.broadcast_to(a, shape).ravel().tolist() for a in args]
    return np.fromiter(map(fn, workers, *flat), float, count=len(workers)).reshape(shape)


# --- The engine step ----------------------------------------------------------------------------------------------

class _Pricer:
    """`Worker.step` of each case's worker (the closure `arch._stepper` builds) at given decodes and contexts, for
    any prompt tokens: the terms that do not depend on those are computed once, since a solver over the prompt
    tokens (`_mixed_step`'s) prices many steps that differ in them alone. The terms and their order are the
    closure's; arguments are arrays over the elements, or (j, n) arrays pricing j steps of each element."""

    def __init__(self, c: _Cases, decode, context, prefill_context=0.0) -> None:
        k, terms = c.k, c.terms
        # What the step reads of the cases, not the cases themselves: `_excess` keeps its pricer on them, and a
        # reference back would make a cycle of every solver's frame, which only the cyclic collector frees (and
        # the vector passes run with it paused).
        self.k, self.terms, self.expm1, self.prefill_context = k, terms, c.expm1, prefill_context
        self.width = width = decode * k.width_k
        self.logits = width * k.logit_fl
        seen, window_seen, read = _context_terms(c, context)
        self.prefill_seen, self.prefill_window_seen = _prefill_context_terms(c, prefill_context)
        self.queries = width * seen
        self.window_queries = width * window_seen if "swa_qk" in terms else None
        self.index_queries = width * context if "index_qk" in terms else None
        self.reads = decode * read / k.bw

    def __call__(self, prefill=0.0) -> np.ndarray:
        k, terms, width = self.k, self.terms, self.width
        tokens = width + prefill
        total = np.maximum((tokens * k.dense_fl + self.logits) / k.gemm_s, k.dense_read)
        if "experts" in terms:
            # Routed experts. A dense worker's coefficients are all 0 here, which makes its term an exact 0 (see
            # `_pack`), as the scalar step that leaves the term out.
            group_tokens = tokens * k.dp
            touched = k.experts_local * -self.expm1(group_tokens * k.miss)
            rows = np.maximum(group_tokens * k.active * k.experts_local / k.experts, touched * k.tile)
            moe = np.maximum(rows * k.expert_fl / k.gemm_s, touched * k.expert_bytes / k.mem_s)
            moe = moe + tokens * k.moe_token
            if np.ndim(prefill):
                moe = moe + (prefill > 0) * k.expert_step
            elif prefill > 0:
                moe = moe + k.expert_step
            total = total + moe
        pf = prefill * k.qk_scale
        flops = (self.queries + pf * self.prefill_seen) * k.attn_qk
        if "swa_qk" in terms:
            flops = flops + (self.window_queries + pf * self.prefill_window_seen) * k.swa_qk
        if "index_qk" in terms:
            flops = flops + (self.index_queries + prefill * self.prefill_context) * k.index_qk
        total = total + (flops / k.attn_flops_s + self.reads) / k.attn_eff
        total = total + tokens * k.elem
        if "ar" in terms and "a2a" in terms:
            total = total + ((k.ar_fixed + tokens * k.ar_token) + (k.a2a_fixed + tokens * k.a2a_token))
        elif "ar" in terms:
            total = total + (k.ar_fixed + tokens * k.ar_token)
        elif "a2a" in terms:
            total = total + (k.a2a_fixed + tokens * k.a2a_token)
        return k.pp * total + k.fixed


def _step(c: _Cases, decode, context, prefill=0.0, prefill_context=0.0) -> np.ndarray:
    """`Worker.step` of each case's worker (see `_Pricer`); the scalar step itself for a few elements."""
    if c.n <= _FEW_STEPS:
        return _one_by_one(c, lambda w, *args: w.step(*args), decode, context, prefill, prefill_context)
    return _Pricer(c, decode, context, prefill_context)(prefill)


def _context_terms(c: _Cases, context) -> tuple:
    """What a step's attention takes from the decoding sequences' context: the context a query sees (top-k
    bound), the one sliding-window layers see, and the KV bytes a sequence reads. At the cases' own mean context
    (`c.ctx`, which most steps decode at) they are per-element constants, computed once for the cases."""
    own = context is c.__dict__.get("ctx")
    if own and "_ctx_terms" in c.__dict__:
        return c.__dict__["_ctx_terms"]
    k, terms = c.k, c.terms
    # Dense attention has top-k 1e18, which min() leaves the context alone at.
    seen = np.minimum(context, k.topk) if "sparse" in terms else context
    window_seen = np.minimum(context, k.window) if "swa_qk" in terms or "kv_swa" in terms else None
    read = k.kv_main * seen
    if "kv_index" in terms:
        read = read + k.kv_index * context
    if "kv_swa" in terms:
        read = read + k.kv_swa * window_seen
    if "state" in terms:
        # Read and written back: two additions, as the scalar step makes them.
        read = read + k.state
        read = read + k.state
    out = seen, window_seen, read
    if own:
        c.__dict__["_ctx_terms"] = out
    return out


def _prefill_context_terms(c: _Cases, prefill_context) -> tuple:
    """The context a prompt's queries see (top-k bound) and the one sliding-window layers see; constants at the
    cases' own half prompt (`c.half_isl`)."""
    own = prefill_context is c.__dict__.get("half_isl")
    if own and "_prefill_terms" in c.__dict__:
        return c.__dict__["_prefill_terms"]
    k, terms = c.k, c.terms
    seen = np.minimum(prefill_context, k.topk) if "sparse" in terms else prefill_context
    window_seen = np.minimum(prefill_context, k.window) if "swa_qk" in terms else None
    if own:
        c.__dict__["_prefill_terms"] = seen, window_seen
    return seen, window_seen


# --- Solvers, in lockstep -----------------------------------------------------------------------------------------

def _regula_falsi(g: Callable[[_Cases, np.ndarray], np.ndarray], c: _Cases, lo: np.ndarray, g_lo: np.ndarray,
                  hi: np.ndarray, g_hi: np.ndarray, rel: float, start: np.ndarray | None = None,
                  steps: int = 40, tol: np.ndarray | float = 0.0, closing: bool = False
                  ) -> tuple[np.ndarray, np.ndarray]:
    """`serving.regula_falsi` for every element at once: each narrows its own bracket from its own `start`, with
    its own Illinois halving (or, `closing`, Anderson-Bjorck scaling and points kept off the ends, as
    `serving.regula_falsi_steps`), and stops at its own test; `g(cases, x)` sees the elements still narrowing
    (and, until they are the majority, finished ones at their lower end, whose values are dropped). `tol`: each
    element's (or all elements') tolerance of |g| at a root."""
    out_lo, out_hi = np.array(lo, float), np.array(hi, float)
    lo, hi, g_lo, g_hi = out_lo.copy(), out_hi.copy(), np.array(g_lo, float), np.array(g_hi, float)
    n = lo.size
    tol = np.broadcast_to(np.asarray(tol, float), (n,))
    # Which end the last step kept (the scalar `side`: -1 the lower, 1 the upper, neither at first).
    was_below = was_above = np.zeros(n, bool)
    live, frame, pos = np.ones(n, bool), c.take(None), np.arange(n)
    for _ in range(steps):
        live &= ~(hi - lo <= rel * hi)
        still = np.count_nonzero(live)
        if not still:
            break
        if 2 * still < live.size:
            out_lo[pos], out_hi[pos] = lo, hi
            live, frame, pos, lo, hi, g_lo, g_hi, was_below, was_above, tol = _narrow(
                live, frame, pos, lo, hi, g_lo, g_hi, was_below, was_above, tol)
            if start is not None:
                start = start[pos]  # (on the first step; it is dropped after)
        # The secant point where it falls inside, else the middle. An infinite value at either end makes the
        # secant NaN (inf / inf, or 0 x inf), which is never inside: the scalar's test for finite values.
        secant = (lo * g_hi - hi * g_lo) / (g_hi - g_lo)
        if closing:
            mid = (lo + hi) / 2
            x = np.where(np.isfinite(g_lo) & np.isfinite(g_hi) & (g_hi > g_lo), secant, mid)
            x = np.minimum(np.maximum(x, lo + 0.99 * rel * lo), hi - 0.99 * rel * hi)
            x = np.where((lo < x) & (x < hi), x, mid)
        else:
            x = np.where((g_hi > g_lo) & (lo < secant) & (secant < hi), secant, (lo + hi) / 2)
        if start is not None:
            x = np.where((lo < start) & (start < hi), start, x)
            start = None
        frame.live = live
        g_x = g(frame, np.where(live, x, lo))
        below = g_x < 0
        below &= live
        above = live ^ below  # (and the roots, which stop below)
        # Illinois: an end kept twice in a row has its value halved (or scaled by `_kept_end`).
        if closing:
            g_hi, g_lo = (np.where(above, g_x, np.where(below & was_below, g_hi * _kept_end(g_x, g_lo), g_hi)),
                          np.where(below, g_x, np.where(above & was_above, g_lo * _kept_end(g_x, g_hi), g_lo)))
        else:
            g_hi = np.where(above, g_x, np.where(below & was_below, g_hi / 2, g_hi))
            g_lo = np.where(below, g_x, np.where(above & was_above, g_lo / 2, g_lo))
        lo = np.where(below, x, lo)
        hi = np.where(above, x, hi)
        was_below, was_above = below, above
        root = np.abs(g_x) <= tol
        if root.any():
            root &= live
            lo[root] = x[root]
            live &= ~root
    out_lo[pos], out_hi[pos] = lo, hi
    return out_lo, out_hi


def _kept_end(new: np.ndarray, replaced: np.ndarray) -> np.ndarray:
    """`serving._kept_end` under `closing`: 1 - new / replaced, a half where that is not positive, 1 where either
    value is not finite or the replaced one is 0."""
    m = 1 - new / replaced
    m = np.where(m > 0, m, 0.5)
    return np.where(np.isfinite(new) & np.isfinite(replaced) & (replaced != 0), m, 1.0)


def _least_fixed_point(g: Callable[[_Cases, np.ndarray], np.ndarray], c: _Cases, top: np.ndarray,
                       rel: float = 1e-9) -> np.ndarray:
    """`serving.least_fixed_point` for every element at once. An element whose step lands at or past its point
    leaves the climb with its bracket; the brackets are narrowed together once every element has left (each
    element's sequence of points is its own, whichever others share the batch)."""
    n = top.size

    def over(cs: _Cases, b: np.ndarray) -> np.ndarray:
        v = g(cs, b)
        return np.where(np.isfinite(v), b - v, np.inf)

    view = c.take(None)
    view.live = np.ones(n, bool)
    o_lo = over(view, np.zeros(n))
    out = np.where((o_lo >= 0) & np.isfinite(o_lo), 0.0, np.inf)
    live = ~(o_lo >= 0)
    lo, b, top = np.zeros(n), np.minimum(-o_lo, top), np.array(top, float)
    # The brackets of the elements that land at or past their point: [lo, b] with their values.
    bracketed = np.zeros(n, bool)
    b_lo, b_o_lo, b_b, b_o = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    pos = np.arange(n)
    for _ in range(100):
        still = np.count_nonzero(live)
        if not still:
            break
        if 2 * still < live.size:
            live, view, pos, lo, o_lo, b, top = _narrow(live, view, pos, lo, o_lo, b, top)
        view.live = live
        o = over(view, b)
        landed = o >= 0
        landed &= live
        if landed.any():
            out[pos[landed]] = b[landed]
            hit = landed & (o != 0)
            i = pos[hit]
            bracketed[i] = True
            b_lo[i], b_o_lo[i], b_b[i], b_o[i] = lo[hit], o_lo[hit], b[hit], o[hit]
        # Past the top with no point: out stays inf. Below the point: step to g(b), or further along the secant
        # through the last two points.
        climbing = live ^ landed
        climbing &= ~(b >= top)
        ahead = b - o
        secant = b - o * (b - lo) / (o - o_lo)
        ahead = np.where((o > o_lo) & (secant > ahead), secant, ahead)
        new_b = np.minimum(ahead, top)
        close = new_b - b <= rel * new_b
        close &= climbing
        if close.any():
            out[pos[close]] = new_b[close]
        np.copyto(lo, b, where=climbing)
        np.copyto(o_lo, o, where=climbing)
        np.copyto(b, new_b, where=climbing)
        live = climbing ^ close
    # Elements still climbing after 100 steps have no point to settle at: out stays inf.
    i = np.flatnonzero(bracketed)
    if i.size:
        cb = c.take(i)
        cb.live = np.ones(i.size, bool)
        left, right = _regula_falsi(over, cb, b_lo[i], b_o_lo[i], b_b[i], b_o[i], rel)
        # A bracket that closed on the wall holds no point: the count climbs into it.
        out[i] = np.where(np.isfinite(over(cb, right)), left, np.inf)
    return out


# --- The serving model's parts ------------------------------------------------------------------------------------

def _excess(c: _Cases, t: np.ndarray) -> np.ndarray:
    """`_mixed_step`'s `excess`: how far a step of t seconds is longer than the step carrying the prompt tokens
    that arrive during it (c carries the batch `b` and the `room` its decodes leave)."""
    # At least one chunk on the busiest attention-DP group where other groups' prompts stall this one's steps.
    floor = np.where(c.stall > 1, np.minimum(c.isl_eff, c.room), 0.0)
    prompt = np.minimum(np.maximum(c.lam * c.isl_eff * t, floor), c.room)
    if c.n <= _FEW_STEPS:
        return t - _step(c, c.b, c.ctx, prompt, c.half_isl)
    price = c.__dict__.get("_price")
    if price is None:
        price = c.__dict__["_price"] = _Pricer(c, c.b, c.ctx, c.half_isl)
    return t - price(prompt)


def _chunk_cost(c: _Cases, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`serving._chunk_cost`'s (room, decode step, what a chunk in the room adds) at b decoding: the room the
    decodes leave in the token budget, and the steps without and with a chunk in it. The decode step is priced
    with the prompt context the chunk has, which changes nothing when there is no prompt token."""
    room = np.maximum(c.chunk - b, 1.0)
    price = _Pricer(c, b, c.ctx, c.half_isl)
    base = price()
    return room, base, price(np.minimum(c.isl_eff, room)) - base


def _mixed_step(c: _Cases, b: np.ndarray, seen: np.ndarray | None = None,
                cost: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """`serving._mixed_step` at the cases' own arrival rates (`lam`): the closed form where fewer than one chunk
    arrives per step, inf past the wall, else the fixed point inside [base, full] by regula falsi. `b` is an
    array over the elements, or (j, n) for j batches of each element; `seen` (over the elements) the weight of
    the chunk-carrying steps a decoding sequence sees, 1 where not given; `cost` `_chunk_cost(c, b)` where the
    caller has it (a search over the rate at one batch)."""
    if c.n <= _FEW:
        return _one_by_one(c, serving._mixed_step, b, c.ctx, c.lam, c.isl_eff, c.isl, c.chunk, c.stall,
                           1.0 if seen is None else seen)
    room, base, extra = _chunk_cost(c, b) if cost is None else cost
    chunks = np.maximum(1.0, c.isl_eff / room)
    rate = c.lam
    load = rate * c.stall * chunks * extra
    line = base / (1 - load)
    settled = (load < 1) & (rate * c.stall * line * chunks <= 1)
    # A rate of 0 (which a Workload never has) steps the decodes alone: `base`.
    t = np.where(settled, line, base)
    if seen is not None:
        share = rate * c.stall * line * chunks
        held = 1 - share + share * seen
        weighed = ((1 - share) * base + share * seen * (base + extra)) / held
        t = np.where(settled & (seen != 1) & (rate > 0), np.where(held > 0, weighed, base), t)
    rest = (rate > 0) & ~settled
    if not rest.any():
        return t
    s, at = _part(c, rest)
    s.b, s.room = b[at], room[at]
    base, extra, rest = base[at], extra[at], rest[at]
    full = _step(s, s.b, s.ctx, s.room, s.half_isl)
    wall = s.lam * s.isl_eff * full > s.room
    e_base, e_full = _excess(s, np.stack([base, full]))
    t_rest = np.where(wall, np.inf, np.where(e_base >= 0, base, full))
    # The fixed points left, as a flat selection of the (possibly (j, n)) arrays and the cases they belong to.
    solve = np.flatnonzero(rest & ~wall & ~(e_base >= 0) & ~(e_full <= 0))
    if solve.size:
        r = s.take(solve % s.n)
        r.b, r.room = s.b.reshape(-1)[solve], s.room.reshape(-1)[solve]
        base, full, extra = base.reshape(-1)[solve], full.reshape(-1)[solve], extra.reshape(-1)[solve]
        # Started from the line through a whole chunk (see the scalar function).
        slope = r.lam * r.isl_eff * extra / np.minimum(r.isl_eff, r.room)
        start = np.where(slope < 1, np.minimum(np.maximum(base / (1 - slope), base), full), full)
        t_rest.reshape(-1)[solve] = _regula_falsi(_excess, r, base, e_base.reshape(-1)[solve], full,
                                                  e_full.reshape(-1)[solve], 1e-9, start)[0]
    t[at] = np.where(rest, t_rest, t[at])
    return t


def _full_step(c: _Cases, b: np.ndarray) -> np.ndarray:
    """`serving._full_step`: a step full to its token budget."""
    return _step(c, b, c.ctx, np.maximum(c.chunk - b, 1.0), c.half_isl)


def _token_time(c: _Cases, n: np.ndarray) -> np.ndarray:
    """`open_loop_agg`'s `token_time`: the mean token time at a batch of n, every step full past the wall."""
    n = np.maximum(n, 1.0)  # `open_loop_agg`'s `decoding`
    t_n = _mixed_step(c, n)
    wall = ~np.isfinite(t_n)
    if wall.any():
        s, at = _part(c, wall)
        t_n[at] = np.where(wall[at], _full_step(s, n[at]), t_n[at])
    return t_n / c.accept


def _batch_sd(lam: np.ndarray, b: np.ndarray, slope: np.ndarray, osl: np.ndarray) -> np.ndarray:
    """`serving._batch_sd`."""
    gain = lam * np.maximum(osl - 1, 0.0) * slope
    return np.where(gain >= 1, np.inf, np.sqrt(np.maximum(b, 0.0)) / (1 - gain))


def _sd_excess(c: _Cases, sd: np.ndarray) -> np.ndarray:
    """`_wandering_sd`'s `excess`: sd less the spread the slope over [b - sd, b + sd] implies."""
    lo, hi = np.maximum(c.b - sd, 0.0), c.b + sd
    t_hi, t_lo = _token_time(c, np.stack([hi, lo]))
    return sd - _batch_sd(c.lam, c.b, (t_hi - t_lo) / (hi - lo), c.osl)


def _wandering_sd(c: _Cases) -> np.ndarray:
    """`serving._wandering_sd` with `open_loop_agg`'s token time, at each case's batch `b`: doubling from
    sqrt(b) until the excess turns, then regula falsi to 1e-3; inf where twelve doublings never turn it."""
    n = c.b.size
    lo = np.sqrt(np.maximum(c.b, 1.0))
    g_lo = _sd_excess(c, lo)
    out = np.where(g_lo >= 0, lo, np.inf)
    # The brackets of the elements whose excess turns: [lo, hi] with their values.
    turned = np.zeros(n, bool)
    b_lo, b_g_lo, b_hi, b_g_hi = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    live, view, pos = ~(g_lo >= 0), c, np.arange(n)
    hi, g_hi = lo.copy(), g_lo.copy()
    for _ in range(12):
        if not live.any():
            break
        live, view, pos, lo, g_lo, hi, g_hi = _narrow(live, view, pos, lo, g_lo, hi, g_hi)
        hi = np.where(live, hi * 2, hi)
        g_hi = np.where(live, _sd_excess(view, hi), g_hi)
        done = live & (g_hi >= 0)
        i = pos[done]
        turned[i] = True
        b_lo[i], b_g_lo[i], b_hi[i], b_g_hi[i] = lo[done], g_lo[done], hi[done], g_hi[done]
        live &= ~done
        lo, g_lo = np.where(live, hi, lo), np.where(live, g_hi, g_lo)
    # Elements that never turned in twelve doublings: out stays inf.
    i = np.flatnonzero(turned)
    if i.size:
        out[i] = _regula_falsi(_sd_excess, c.take(i), b_lo[i], b_g_lo[i], b_hi[i], b_g_hi[i], 1e-3)[1]
    return out


def _lognormal_q(mean, cv: np.ndarray, z) -> np.ndarray:
    """`serving.lognormal_q` (z a number, or a column of them for several quantiles of each element)."""
    s2 = np.log1p(cv * cv)
    return np.where(cv <= 0, mean, mean * np.exp(np.sqrt(s2) * z - s2 / 2))


def _kingman_wait(rho: np.ndarray, service: np.ndarray, ca: np.ndarray, cs: np.ndarray) -> np.ndarray:
    """`serving._kingman_wait`."""
    return (ca * ca + cs * cs) / 2 * rho / (1 - rho) * service


def _service_spread(c: _Cases, price: Callable[[np.ndarray], np.ndarray]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`serving._service_spread` of each case (`price` maps (j, n) lengths to their service times): the mean,
    the CV and the rows p50 .. p99.9, with the cases' known prompt-length ratios (`known`, NaN where not given)."""
    isl, isl_cv = c.isl, c.isl_cv
    s2 = np.log1p(isl_cv * isl_cv)
    sd = np.sqrt(s2)
    times = price(np.stack([isl * np.exp(sd * _SQRT_2 * x - s2 / 2) for x, _ in serving._HERMITE]))
    first = np.zeros(c.n)
    second = np.zeros(c.n)
    for (_, weight), t in zip(serving._HERMITE, times):
        first = first + weight * t
        second = second + weight * t * t
    first = first / _SQRT_PI
    second = second / _SQRT_PI
    cv = np.where(first > 0, np.sqrt(np.maximum(second / (first * first) - 1, 0.0)), 0.0)
    lengths = np.where(np.isnan(c.known), _lognormal_q(isl, isl_cv, np.array(_Z)[:, None]), isl * c.known)
    quantiles = price(lengths)
    flat = isl_cv <= 0
    if flat.any():
        one = price(isl[None, :])[0]
        first = np.where(flat, one, first)
        cv = np.where(flat, 0.0, cv)
        quantiles = np.where(flat, one, quantiles)
    return first, cv, quantiles


def _quantile_with_wait(service: np.ndarray, service_cv: np.ndarray, wait: np.ndarray, rho: np.ndarray, q: float,
                        z: float) -> np.ndarray:
    """`serving._quantile_with_wait`: its Newton steps on every element at once; a fixed service's closed form and
    an element without a wait by the scalar function."""
    out = np.empty(service.size)
    newton = (rho > 0) & (wait > 0) & (service_cv > 0)
    rest = np.flatnonzero(~newton)
    if rest.size:
        out[rest] = _py(partial(serving._quantile_with_wait, q=q, z=z), service[rest], service_cv[rest], wait[rest],
                        rho[rest])
    idx = np.flatnonzero(newton)
    if not idx.size:
        return out
    m, cv, w, r = service[idx], service_cv[idx], wait[idx], rho[idx]
    theta = w / r
    longer = m + theta
    longer_cv = _hypot(cv * m, theta) / longer
    s2b = np.log1p(longer_cv * longer_cv)
    sb = np.sqrt(s2b)
    mub = np.log(longer) - s2b / 2
    s2a = np.log1p(cv * cv)
    sa = np.sqrt(s2a)
    mua = np.log(m) - s2a / 2
    lo, hi = mua + sa * z, mub + sb * z
    low, high = np.minimum(lo, hi), np.maximum(lo, hi)
    u = (lo + hi) / 2
    for _ in range(serving.NEWTON_STEPS):
        a, b = (u - mua) / sa, (u - mub) / sb
        cdf = (1 - r) * 0.5 * _py(math.erfc, -a / _SQRT_2) + r * 0.5 * _py(math.erfc, -b / _SQRT_2)
        pdf = (1 - r) * np.exp(-a * a / 2) / (sa * _SQRT_2PI) + r * np.exp(-b * b / 2) / (sb * _SQRT_2PI)
        step = np.minimum(np.maximum(u - (cdf - q) / np.where(pdf > 0, pdf, 1.0), low), high)
        u = np.where(pdf > 0, step, u)
    out[idx] = np.exp(u)
    return out


def _queue_percentiles(service: np.ndarray, wait: np.ndarray, rho: np.ndarray, extra: np.ndarray,
                       phase: np.ndarray, service_q: np.ndarray, service_cv: np.ndarray) -> np.ndarray:
    """`serving._queue_percentiles` with the service's own percentiles (`service_q`, rows p50 .. p99.9) and CV:
    rows mean, p50 .. p99.9."""
    out = np.empty((len(_KEYS), service.size))
    out[0] = extra + service + wait + phase / 2
    for k, (q, tail, z) in enumerate(zip(_Q, _TAIL, _Z)):
        queued = np.where((rho > tail) & (rho > 0), (wait / rho) * np.log(rho / tail), 0.0)
        own = service_q[k]
        if q <= 0.5:
            out[k + 1] = extra + _quantile_with_wait(service, service_cv, wait, rho, q, z) + own - \
                _lognormal_q(service, service_cv, z) + phase * q
            continue
        # Independent parts: the root sum of squares of their excesses over their means (see serving).
        out[k + 1] = out[0] + np.sqrt(_square(np.maximum(own - service, 0.0)) + _square(np.maximum(queued - wait, 0.0))
                                      + _square(phase * (q - 0.5)))
    return out


def _erlang_c(servers: np.ndarray, offered: np.ndarray) -> np.ndarray:
    """`serving._erlang_c`: the recursion for up to 64 servers (run for as many steps as each element has
    servers), the Halfin-Whitt limit beyond."""
    out = np.where(offered <= 0, 0.0, 1.0)
    small = np.flatnonzero((offered > 0) & (offered < servers) & (servers <= 64))
    if small.size:
        s, a = servers[small], offered[small]
        blocked = np.ones(small.size)
        for k in range(1, int(s.max()) + 1):
            blocked = np.where(k <= s, a * blocked / (k + a * blocked), blocked)
        out[small] = s * blocked / (s - a * (1 - blocked))
    big = np.flatnonzero((offered > 0) & (offered < servers) & (servers > 64))
    if big.size:
        beta = (servers[big] - offered[big]) / np.sqrt(offered[big])
        density = _py(math.exp, -beta * beta / 2) / _SQRT_2PI
        below = 0.5 * (1 + _py(math.erf, beta / _SQRT_2))
        out[big] = np.where(beta > 30, 0.0, 1.0 / (1.0 + beta * below / density))
    return out


def _slot_wait(lam: np.ndarray, slots: np.ndarray, hold: np.ndarray, hold_cv: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`serving._slot_wait` as the arrays (mean, prob, decay) of its `SlotWait`s."""
    none = (hold <= 0) | (lam <= 0) | (slots >= 1 << 29)
    offered = lam * hold
    servers = np.maximum(1.0, np.trunc(slots))
    full = offered >= servers
    prob = _erlang_c(servers, offered)
    decay = (servers - offered) / hold / ((1 + hold_cv * hold_cv) / 2)
    mean = np.where(none, 0.0, np.where(full, np.inf, prob / decay))
    prob = np.where(none, 0.0, np.where(full, 1.0, prob))
    decay = np.where(none, np.inf, np.where(full, 0.0, decay))
    return mean, prob, decay


def _slot_quantile(prob: np.ndarray, decay: np.ndarray, q: float) -> np.ndarray:
    """`SlotWait.quantile`."""
    tail = 1 - q
    return np.where((prob > tail) & (decay < np.inf), np.log(prob / tail) / decay, 0.0)


def _chunk_steps(c: _Cases, b: np.ndarray, rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`serving._chunk_steps` as (durations, steps per second), each (2 x CHUNK_POINTS + 1, n) in the scalar list's
    order: a partial step and the one that takes the next prompt for each prompt length, then the full steps.
    Lengths that leave no partial step have both their entries at 0 s and 0/s, which add nothing to any sum."""
    rest = np.maximum(c.chunk - b, 1.0)
    isl_eff = c.isl_eff
    each = c.lam * c.stall / CHUNK_POINTS
    full_t = _step(c, b, c.ctx, rest, isl_eff / 2)
    length = np.maximum(_lognormal_q(isl_eff, c.isl_cv, np.array(_CHUNK_Z)[:, None]), 1.0)
    whole = np.floor(length / rest)
    part = length - whole * rest
    full = 0.0
    for k in range(CHUNK_POINTS):
        full = full + each * whole[k]
    partial = part > 0
    durations = np.zeros((2 * CHUNK_POINTS + 1, b.size))
    rates = np.zeros_like(durations)
    durations[0:-1:2] = np.where(partial, _step(c, b, c.ctx, part, length / 2), 0.0)
    durations[1:-1:2] = np.where(partial, _step(c, b, c.ctx, np.minimum(part + isl_eff, rest), length / 2), 0.0)
    rates[0:-1:2] = np.where(partial, each * (1 - rho), 0.0)
    rates[1:-1:2] = np.where(partial, each * rho, 0.0)
    durations[-1], rates[-1] = full_t, full
    return durations, rates


_INV_CDF = (
    ((2.5090809287301226727e+3, 3.3430575583588128105e+4, 6.7265770927008700853e+4, 4.5921953931549871457e+4,
      1.3731693765509461125e+4, 1.9715909503065514427e+3, 1.3314166789178437745e+2, 3.3871328727963666080e+0),
     (5.2264952788528545610e+3, 2.8729085735721942674e+4, 3.9307895800092710610e+4, 2.1213794301586595867e+4,
      5.3941960214247511077e+3, 6.8718700749205790830e+2, 4.2313330701600911252e+1, 1.0)),
    ((7.7454501427834140764e-4, 2.2723844989269184583e-2, 2.4178072517745061177e-1, 1.2704582524523683826e+0,
      3.6478483247632046050e+0, 5.7694972214606914055e+0, 4.6303378461565452959e+0, 1.4234371107496835773e+0),
     (1.0507500716444168432e-9, 5.4759380849953449460e-4, 1.5198666563616457197e-2, 1.4810397642748007459e-1,
      6.8976733498510000455e-1, 1.6763848301838038494e+0, 2.0531916266377588219e+0, 1.0)),
    ((2.0103343992922881327e-7, 2.7115555687434875782e-5, 1.2426609473880784386e-3, 2.6532189526576123093e-2,
      2.9656057182850489123e-1, 1.7848265399172913358e+0, 5.4637849111641143699e+0, 6.6579046435011037772e+0),
     (2.0442631033899397856e-15, 1.4215117583164458887e-7, 1.8463183175100546818e-5, 7.8686913114561325910e-4,
      1.4875361290850614853e-2, 1.3692988092273580531e-1, 5.9983220655588793769e-1, 1.0)),
)
"""Wichura's AS241 coefficients as `statistics._normal_dist_inv_cdf` holds them: the central region, then the
tails for sqrt(-log(r)) up to 5 and beyond."""


def _horner(coefficients: Sequence[float], r: np.ndarray) -> np.ndarray:
    value = coefficients[0] * r + coefficients[1]
    for a in coefficients[2:]:
        value = value * r + a
    return value


def _inv_cdf(p: np.ndarray) -> np.ndarray:
    """`statistics.NormalDist().inv_cdf` (Wichura's AS241, as the standard library evaluates it)."""
    q = p - 0.5
    central = np.abs(q) <= 0.425
    r = 0.180625 - q * q
    (num_c, den_c), (num_m, den_m), (num_t, den_t) = _INV_CDF
    x_central = _horner(num_c, r) * q / _horner(den_c, r)
    r = np.sqrt(-np.log(np.where(q <= 0.0, p, 1.0 - p)))
    near = r <= 5.0
    rm, rt = r - 1.6, r - 5.0
    x_tail = np.where(near, _horner(num_m, rm) / _horner(den_m, rm), _horner(num_t, rt) / _horner(den_t, rt))
    x_tail = np.where(q < 0.0, -x_tail, x_tail)
    return np.where(central, x_central, x_tail)


def _arrivals_quantiles(n: np.ndarray, cv: np.ndarray, arrival_cv: np.ndarray) -> np.ndarray:
    """`serving._arrivals_quantile` at every percentile's z (rows p50 .. p99.9): the larger of the gamma
    (Wilson-Hilferty) and the single-longest-prompt approximations."""
    spread = arrival_cv * arrival_cv + cv * cv
    some_arrive = (spread > 0) & (n > 0)
    out = np.tile(n, (len(PERCENTILES), 1))
    i = np.flatnonzero(some_arrive)
    if not i.size:
        return out
    n, cv, spread = n[i], cv[i], spread[i]
    sd = np.sqrt(n * spread)
    skew = _py(pow, spread, 1.5) / np.sqrt(n)
    some = -np.expm1(-n)
    s2 = np.log1p(cv * cv)
    for k, (z, tail) in enumerate(zip(_Z_UP, _CDF_TAIL)):
        base = 1 - skew * skew / 36 + skew * z / 6
        positive = base > 0
        cube = np.zeros_like(base)
        cube[positive] = _py(pow, base[positive], 3)
        gamma = np.where(positive, np.maximum(n + sd * 2 / skew * (cube - 1), 0.0), 0.0)
        one = np.where(cv > 0, np.exp(np.sqrt(s2) * _inv_cdf(1 - tail / some) - s2 / 2), 1.0)
        out[k, i] = np.where(tail >= some, gamma, np.maximum(gamma, one))
        # Where a single prompt may make the quantile (or the test between the two is close), numpy's exp, log
        # and expm1 round the last bit otherwise than the C library: those few take the scalar function itself.
        near = np.flatnonzero(((tail < some) & (one >= gamma * (1 - 1e-9))) | (np.abs(tail - some) <= 1e-12))
        if near.size:
            out[k, i[near]] = _py(lambda n_, cv_, a_, z=z: serving._arrivals_quantile(n_, cv_, z, a_), n[near],
                                  cv[near], arrival_cv[i][near])
    return out


def _step_percentiles(c: _Cases, t_mean: np.ndarray, t_decode: np.ndarray, durations: np.ndarray,
                      rates: np.ndarray, batch: np.ndarray, gap: np.ndarray, t_lone: np.ndarray,
                      arrival_cv: np.ndarray, closed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """`serving._step_percentiles` as (ITL, TPOT), each (6, n): rows mean, p50 .. p99.9; `batch` and `gap` are
    (5, n), one row per percentile."""
    n_el = t_mean.size
    accept = c.accept
    # Sums in the list's order, one entry after another, as Python's sum() adds them.
    chunk_rate = rates[0].copy()
    weighted = durations[0] * rates[0]
    for k in range(1, len(rates)):
        chunk_rate = chunk_rate + rates[k]
        weighted = weighted + durations[k] * rates[k]
    mean_d = np.where(chunk_rate > 0, weighted / chunk_rate, t_decode)
    delta = np.maximum(mean_d - t_decode, 0.0)
    share = np.where(delta > 0, np.minimum(np.maximum((t_mean * accept - t_decode) / delta, 0.0), 1.0), 0.0)
    step_mean = t_mean * accept
    rho = np.where(step_mean > 0, np.minimum(np.maximum((step_mean - t_lone) / step_mean, 0.0), 0.999), 0.0)
    m = np.maximum(c.osl / (1 + c.osl_cv * c.osl_cv) - 1, 1.0)
    n = c.lam * c.stall * m * t_mean
    # sorted(steps, reverse=True): by duration, then rate, slowest first; the empty entries (0, 0) come last.
    order = np.lexsort((rates.T, durations.T), axis=-1)[:, ::-1]
    d_sorted = np.take_along_axis(durations.T, order, axis=1)
    seen = np.cumsum(share[:, None] * np.take_along_axis(rates.T, order, axis=1) / chunk_rate[:, None], axis=1)
    rows = np.arange(n_el)
    more = np.where(n > 0, np.maximum(_arrivals_quantiles(n, c.isl_cv, arrival_cv) - n, 0.0) / n, 0.0)
    itl, tpot = np.empty((len(_KEYS), n_el)), np.empty((len(_KEYS), n_el))
    itl[0] = tpot[0] = t_mean
    floor = np.zeros(n_el)
    for k, tail in enumerate(_TAIL):
        value = t_decode / accept + gap[k]
        # The first step (slowest first) at which the steps seen reach the tail, if any, is the percentile's.
        reached = seen >= tail
        first = reached.argmax(axis=1)
        d = d_sorted[rows, first]
        itl[k + 1] = np.where(reached[rows, first] & ~(value > d), d, value)
        excess = (t_mean * rho if closed else t_mean * rho / (1 - rho)) * more[k]
        floor = tpot[k + 1] = np.maximum(t_mean + _hypot(excess, batch[k]), floor)
    return itl, tpot


def _e2e(ttft: np.ndarray, tpot: np.ndarray, osl: np.ndarray, osl_cv: np.ndarray,
         slot: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """`serving._e2e`; `slot` the decode-slot wait as `_slot_wait`'s arrays, where there is one (disaggregated
    decode). Without it (`open_loop_agg` puts that wait in the TTFT) its zero terms are left out, which changes no
    sum."""
    mean = ttft[0] + (osl - 1) * tpot[0]
    if slot is not None:
        mean = mean + slot[0]
    out = np.empty_like(ttft)
    out[0] = mean
    for k, (q, z) in enumerate(zip(_Q, _Z)):
        length = _lognormal_q(osl, osl_cv, z)
        wait = _slot_quantile(slot[1], slot[2], q) if slot is not None else None
        if q <= 0.5:
            out[k + 1] = ttft[k + 1] + (np.maximum(length, 1.0) - 1) * tpot[0]
            if wait is not None:
                out[k + 1] = out[k + 1] + wait
            continue
        squares = (_square(np.maximum(ttft[k + 1] - ttft[0], 0.0))
                   + _square(np.maximum(length - osl, 0.0) * tpot[0])
                   + _square((osl - 1) * np.maximum(tpot[k + 1] - tpot[0], 0.0)))
        if wait is not None:
            squares = squares + _square(np.maximum(wait - slot[0], 0.0))
        out[k + 1] = mean + np.sqrt(squares)
    return out


# --- open_loop_agg ------------------------------------------------------------------------------------------------

class _Outcome:
    """What each case came to: a stable prediction's figures, or which unstable result and its load."""

    def __init__(self, n: int) -> None:
        self.code = np.full(n, _STABLE, np.int8)
        self.load = np.zeros(n)
        self.batch = np.zeros(n)
        self.metrics = {m: np.zeros((len(_KEYS), n)) for m in ("ttft", "tpot", "itl", "e2e")}

    def settle(self, c: _Cases, mask: np.ndarray, code: int, load: np.ndarray | float) -> _Cases:
        """Record the cases under `mask` as unstable with `code` at `load`; the others, to carry on with."""
        if not mask.any():
            return c
        i = c.pos[mask]
        self.code[i] = code
        self.load[i] = load[mask] if isinstance(load, np.ndarray) else load
        return c.take(np.flatnonzero(~mask))

    def record(self, pos: np.ndarray, batch: np.ndarray, load: np.ndarray, **metrics: np.ndarray) -> None:
        """Record stable predictions."""
        self.batch[pos], self.load[pos] = batch, load
        for name, value in metrics.items():
            self.metrics[name][:, pos] = value


def _open_loop(c: _Cases, out: _Outcome) -> None:
    """`serving.open_loop_agg` over every case, each unstable case leaving at the check the scalar path returns
    at. Pure computations run in another order where that spares work for cases that leave later; the solvers'
    evaluations (and with them `walled`) are exactly the scalar path's."""
    c = out.settle(c, c.cap < 1, _NO_FIT, np.inf)
    inc = (_step(c, 0.0, 0.0, c.per, c.half_isl) - c.k.fixed) * c.chunks
    c.rho = c.lam * inc
    c = out.settle(c, c.rho >= 1, _OVER, c.rho)
    if not c.n:
        return
    walled = np.zeros(out.code.size, bool)

    def held(cs: _Cases, n: np.ndarray) -> np.ndarray:
        """Sequences in the batch when n are (as in `open_loop_agg`), noting the cases that hit the wall."""
        t_n = _mixed_step(cs, np.maximum(n, 1.0))
        walled[cs.pos[cs.live & ~np.isfinite(t_n)]] = True
        return cs.lam * (cs.osl1 * t_n / cs.accept + _step(cs, n, cs.ctx, cs.per, cs.half_isl) * cs.chunks)

    c.b = _least_fixed_point(held, c, 4 * c.cap)
    lost = ~np.isfinite(c.b)
    c = out.settle(c, lost & walled[c.pos], _WALL, np.maximum(c.rho, 1.0))
    c = out.settle(c, ~np.isfinite(c.b), _OVER, np.maximum(c.rho, 4.0))
    if not c.n:
        return
    # The mean step, and the step of a full batch where the slots are counted (solved together).
    counted = c.cap < 1 << 29
    seen = np.maximum(c.b, 1.0)  # `open_loop_agg`'s `decoding`: a decoding request's steps carry itself at least
    c.t, c.full = _mixed_step(c, np.stack([seen, np.where(counted, c.cap, seen)]))
    c.own = _step(c, c.b, c.ctx, c.per, c.half_isl) * c.chunks
    c.load = np.maximum(c.b / c.cap, c.rho)
    c = out.settle(c, c.b > c.cap, _OVER, c.load)
    # The slot hold: at least what a full batch's steps make it.
    hold = c.own + c.osl1 * c.t / c.accept
    full_hold = _step(c, c.cap, c.ctx, c.per, c.half_isl) * c.chunks + c.osl1 * c.full / c.accept
    hold = np.where((c.cap < 1 << 29) & np.isfinite(c.full), np.maximum(hold, full_hold), hold)
    c.slot_mean, c.slot_prob, c.slot_decay = _slot_wait(c.lam, c.cap, hold, c.osl_cv)
    c = out.settle(c, ~np.isfinite(c.slot_mean), _SLOTS, c.load)
    # The batch's spread (the scalar path checks it after the TTFT and chunk steps, which it does not depend on).
    c.sd = _wandering_sd(c)
    c = out.settle(c, ~np.isfinite(c.sd), _GROWING, c.load)
    if not c.n:
        return
    b, t, rho, accept = c.b, c.t, c.rho, c.accept
    keep = 1 - c.prefix_hit
    service, service_cv, service_q = _service_spread(
        c, lambda n: _step(c, b, c.ctx, np.minimum(n * keep, c.chunk), n / 2) * np.maximum(1.0, n * keep / c.chunk))
    wait = _kingman_wait(rho, service, c.arrival_cv, service_cv)
    # With Poisson arrivals a group is decoding with probability 1 - exp(-b) (`_scheduler_hold`'s `busy`).
    busy = -np.expm1(-b)
    extra = c.request_s + c.hold_steps * t * np.minimum(np.maximum(busy, 0.0), 1.0)
    ttft = _queue_percentiles(service, wait, rho, extra, t, service_q, service_cv)
    ttft[0] = ttft[0] + c.slot_mean
    for k, q in enumerate(_Q):
        ttft[k + 1] = ttft[k + 1] + _slot_quantile(c.slot_prob, c.slot_decay, q)
    durations, rates = _chunk_steps(c, np.maximum(b, 1.0), rho)
    # A percentile's batch, no further than the slots allow; the token times there and at the mean in one solve.
    high = np.minimum(b + np.array(_Z_UP)[:, None] * c.sd, np.maximum(c.cap, b))
    times = _token_time(c, np.vstack([b, high]))
    batch = times[1:] - times[0]
    steps = _step(c, np.vstack([np.maximum(b, 1.0), np.ones_like(b), np.maximum(high, 1.0)]), c.ctx)
    lone, t_lone = steps[0], steps[1]
    gap = (steps[2:] - lone) / accept
    itl, tpot = _step_percentiles(c, t / accept, lone, durations, rates, batch, gap, t_lone,
                                  c.arrival_cv / np.sqrt(np.maximum(c.peers, c.workers)))
    out.record(c.pos, b, c.load, ttft=ttft, tpot=tpot, itl=itl, e2e=_e2e(ttft, tpot, c.osl, c.osl_cv))


def _worker_row(w: Worker) -> list[float]:
    """A worker's step coefficients (`Worker.step_terms`, what its step closes over) and `_WORKER_TERMS`, kept on
    the worker (which never changes) once made: a planner packs the same workers in every round of its search."""
    row = w.__dict__.get("_vector_row")
    if row is None:
        row = w.__dict__["_vector_row"] = _make_row(w)
    return row


def _make_row(w: Worker) -> list[float]:
    values = w.step_terms
    f = w.factors
    hold_steps = f.poll_steps + (f.balance_steps if w.parallel.attention_dp > 1 else 0.0)
    return ([float(values[k]) for k in _STEP_TERMS]
            + [f.accept, w.request_s(), hold_steps, w.kv_full_per_token, w.kv_swa_per_token, w.state_bytes,
               w.memory.kv_gb, f.queue])


def _pack(cases: Sequence[tuple[Worker, Role, Workload]], exact: bool, closed: bool = False) -> _Cases:
    """The cases as arrays: each distinct worker's coefficients packed once and spread to its cases, the
    workloads' and roles' figures, and what `_agg_basics` derives from them. `closed`: the workloads are closed
    loops (their clients in `clients` where an open loop's rate is, the batch slots at `peak_context`, and no
    arrival rate of their own: the closed loop's solvers set `lam`)."""
    index: dict[int, int] = {}
    workers: list[Worker] = []
    slot = []
    for w, _, _ in cases:
        k = index.get(id(w))
        if k is None:
            k = index[id(w)] = len(workers)
            workers.append(w)
        slot.append(k)
    table = np.array([_worker_row(w) for w in workers], float).T
    coef = table[:len(_STEP_TERMS)]
    terms = {term for term, names in _OPTIONAL.items() if any(coef[_STEP_TERMS.index(k)].any() for k in names)}
    if (coef[_STEP_TERMS.index("topk")] < 1e18).any():
        terms.add("sparse")
    # A dense worker's routed-expert coefficients are 0 (no experts, none local or active, no bytes or FLOPs),
    # so with its expert count taken as 1 (the one divisor) the vector step's expert term comes to an exact 0:
    # no mask is needed where dense and MoE workers share a batch.
    dense = coef[_STEP_TERMS.index("experts")] == 0
    for name in _EXPERT_TERMS:
        coef[_STEP_TERMS.index(name), dense] = 0.0
    coef[_STEP_TERMS.index("experts"), dense] = 1.0
    c = _Cases(n=len(cases), terms=frozenset(terms), expm1=_expm1 if exact else np.expm1)
    c.worker = np.empty(len(workers), object)
    c.worker[:] = workers
    c.worker = c.worker[slot]
    per_case = table.take(np.array(slot), axis=1)
    c.coef = per_case[:len(_STEP_TERMS)]
    c.__dict__.update(zip(_WORKER_TERMS, per_case[len(_STEP_TERMS):]))
    known = np.full((len(PERCENTILES), len(cases)), np.nan)
    for i, (_, _, wl) in enumerate(cases):
        if (wl.concurrency if closed else wl.rate) is None:
            raise ValueError("a closed-loop vector pass predicts closed loops: every workload needs its clients"
                             if closed else "predict_open_agg predicts open loops: every workload needs a rate")
        if wl.isl_quantiles:
            ratios = dict(wl.isl_quantiles)
            for k, p in enumerate(PERCENTILES):
                if p in ratios:
                    known[k, i] = ratios[p]
    figures = np.fromiter(chain.from_iterable((wl.isl, wl.osl, wl.concurrency if closed else wl.rate, wl.arrival_cv,
                                               wl.isl_cv, wl.osl_cv, wl.prefix_hit, wl.peers,
                                               role.batch_cap or _NO_SLOTS, role.workers or 1, role.max_num_tokens)
                                              for _, role, wl in cases),
                          float, count=len(cases) * len(_CASE_TERMS)).reshape(len(cases), -1).T.copy()
    c.__dict__.update(zip(_CASE_TERMS, figures))
    c.known = known
    c.pos = np.arange(len(cases))
    c.live = np.ones(len(cases), bool)
    # _agg_basics (with resident_context and Worker.max_sequences), then open_loop_agg's own per-case figures.
    c.isl_eff = c.isl * (1 - c.prefix_hit)
    c.ctx = c.isl + c.osl * (1 + c.osl_cv * c.osl_cv) / 2
    # `peak_context`: closed-loop clients with fixed answer lengths stay in step, each at its full length at once.
    peak = np.where(c.osl_cv == 0, c.isl + c.osl, c.ctx) if closed else c.ctx
    kv = c.kv_full * peak + c.kv_swa_token * np.minimum(peak, c.k.window) + c.state_bytes
    # `serving.batch_slots`: `context_spread`, and `Worker.max_sequences` with that headroom
    prompt = c.isl * c.isl_cv
    b = 1 + c.osl_cv * c.osl_cv
    spread = np.sqrt(prompt * prompt + c.osl * c.osl * (b * b * b / 3 - b * b / 4))
    if closed:
        spread = np.where(c.osl_cv == 0, prompt, spread)
    room = c.kv_gb * GB
    grow = (serving.KV_HOLD_Z * spread) * (c.kv_full + np.where(peak < c.k.window, c.kv_swa_token, 0.0))
    root = (np.sqrt(grow * grow + 4 * kv * room) - grow) / (2 * kv)
    held = np.where((grow > 0) & (room > 0), np.trunc(root * root), np.trunc(room / kv))
    c.cap = np.minimum(c.batch_cap, np.where(kv > 0, held, _NO_SLOTS))
    if closed:
        c.clients = c.__dict__.pop("rate")
        c.stall = np.ones(c.n)  # the measured closed loops line their groups' prefills up (`attention_dp_stall`)
    else:
        c.lam = c.rate / (c.workers * c.k.dp)
        c.stall = c.k.dp.copy()  # `serving.attention_dp_stall`: every group's prompts stall each one's steps
    c.half_isl = c.isl / 2
    c.osl1 = c.osl - 1
    c.per = np.minimum(c.isl_eff, c.chunk)
    c.chunks = np.maximum(1.0, c.isl_eff / c.chunk)
    return c


_prediction = maker(Prediction)
"""`Prediction(*values)`, every field given: a batch makes thousands."""


def _dicts(rows: np.ndarray) -> Iterator[dict[str, float]]:
    """Each case's {mean, p50 .. p99.9} from the rows of a metric (one column per case)."""
    return map(_percentiles, *rows.tolist())


def _predictions(cases: Sequence[tuple[Worker, Role, Workload]], out: _Outcome) -> list[Prediction]:
    """The Prediction of each case: a stable one's figures, or `serving._unstable`'s result (built alike)."""
    code, load, batch = out.code.tolist(), out.load.tolist(), out.batch.tolist()
    stable = np.flatnonzero(out.code == _STABLE)
    ttft, tpot, itl, e2e = (iter(list(_dicts(out.metrics[m][:, stable]))) for m in ("ttft", "tpot", "itl", "e2e"))
    inf = float("inf")
    preds = []
    for i, (_, role, wl) in enumerate(cases):
        workers = {"agg": role.workers or 1}
        k = code[i]
        if k == _STABLE:
            preds.append(_prediction(next(ttft), next(tpot), next(itl), next(e2e), wl.rate, wl.rate * wl.osl,
                                     batch[i], load[i], True, workers, []))
        else:
            note = _NOTES[k].format(chunk=role.max_num_tokens) if k == _WALL else _NOTES[k]
            d = dict.fromkeys(_KEYS, inf)
            preds.append(_prediction(d, d, d, d, 0.0, 0.0, 0.0, load[i], False, workers, [note]))
    return preds


def predict_open_agg(cases: Sequence[tuple[Worker, Role, Workload]], *, exact: bool = False) -> list[Prediction]:
    """`[serving.open_loop_agg(w, role, wl) for w, role, wl in cases]`, computed for all the cases at once: the
    same predictions field for field (to the last bit but for numpy's exp/log family, see the module's notes).
    Cases may mix workers (models, devices, layouts), roles and workloads; every workload needs a rate.

    `exact`: take the expm1 of MoE steps' expert term from the C library, as the scalar step does, instead of
    numpy's (which rounds the last bit differently for some 1.5% of arguments), at a tenth more time or so. The
    steps are then the scalar ones bit for bit, and so are the solvers' paths: with numpy's, a solver whose sign
    test lands within that last bit of a root can end elsewhere in its final bracket (regula falsi's 1e-9), and
    within some 1e-11 of a capacity the slots set, the Erlang wait's cancellation magnifies the last bit a
    trillion times."""
    if not cases:
        return []
    # The predictions are tens of thousands of new dicts and objects, none in a cycle.
    with collector_paused(), np.errstate(all="ignore"):
        # Masked-out branches compute with infinities and zeros (the secant of a bracket with an infinite end,
        # the inverse normal of a probability out of range); their values are discarded, and so are warnings.
        c = _pack(cases, exact)
        out = _Outcome(len(cases))
        _open_loop(c, out)
        return _predictions(cases, out)


# --- disagg, open loops ---------------------------------------------------------------------------------------------

def _disagg_row(wp: Worker, wd: Worker, prefill: Role, decode: Role, wl: Workload, link_bytes_s: float
                ) -> Prediction | tuple:
    """What `serving.disagg` computes once per open-loop case before its decode solve (worker counts, the prefill
    queue's rate, service time and load, the hand-off): the scalar code's own figures; or the case's unstable
    Prediction where it returns one first."""
    if wl.rate is None:
        raise ValueError("predict_open_disagg predicts open loops: every workload needs a rate")
    osl = wl.osl
    cap, per_prefill_group, transfer, service, gaps = _disagg_fixed(wp, wd, prefill, decode, wl, link_bytes_s)
    if cap < 1:
        return serving._unstable({"prefill": 0, "decode": 0}, float("inf"), "one request does not fit decode KV cache")
    if decode.workers:
        n_d = decode.workers
    else:
        per_group = cap / (osl * wd.step(cap, serving.resident_context(wl)))
        n_d = max(1, math.ceil(wl.rate / (serving.PREFILL_TARGET_LOAD * per_group) / wd.parallel.attention_dp))
    lam = wl.rate
    n_p = prefill.workers or max(1, math.ceil(lam / (serving.PREFILL_TARGET_LOAD * per_prefill_group)
                                              / wp.parallel.attention_dp))
    rho_pf = lam / (n_p * wp.parallel.attention_dp) / per_prefill_group
    notes = [] if prefill.workers is not None and decode.workers is not None else [
        serving._sized_note(prefill.workers is None, n_p, decode.workers is None, n_d, "sized for the rate")]
    return (cap, lam / (n_d * wd.parallel.attention_dp), rho_pf, service, wp.request_s() + transfer, gaps, n_p, n_d,
            notes)


def _disagg_fixed(wp: Worker, wd: Worker, prefill: Role, decode: Role, wl: Workload,
                  link_bytes_s: float) -> tuple[int, float, float, tuple[float, ...], float]:
    """The figures of `_disagg_row` the arrival rate leaves alone (the decode slots, a prefill group's rate, the
    hand-off, a prompt's prefill and the answer's token gaps), kept on the prefill worker (which never changes)
    by decode worker, roles, lengths and link: a search over the rate asks for them again at every rate."""
    # The roles by identity (kept in the entry, so that their ids stay theirs): a search's probes share its roles,
    # and hashing a role's dataclasses anew at every probe costs more than the lookup saves.
    key = (id(prefill), id(decode), wl.isl, wl.osl, wl.osl_cv, wl.prefix_hit, wl.isl_cv, wl.isl_quantiles,
           link_bytes_s)
    kept = wp.__dict__.setdefault("_disagg_fixed", {})
    entry = kept.get(id(wd))
    if entry is None or entry[0] is not wd:
        entry = kept[id(wd)] = (wd, {})
    got = entry[1].get(key)
    if got is not None and got[0] is prefill and got[1] is decode:
        return got[2]
    isl, osl = wl.isl, wl.osl
    isl_eff = isl * (1 - wl.prefix_hit)
    mean, cv, quantiles = serving.prefill_spread(wp, wl)
    hit = (serving.batch_slots(wd, decode, wl), serving._prefill_rate(wp, isl_eff, isl, prefill.max_num_tokens),
           serving._kv_transfer(wp, isl, link_bytes_s) + wd.factors.transfer_ms * 1e-3,
           (mean, cv, *(quantiles[p] for p in PERCENTILES)), max(serving.lognormal_q(osl, wl.osl_cv, 0.0) - 1, 1.0))
    entry[1][key] = (prefill, decode, hit)
    return hit


def _disagg(cases: Sequence[tuple[Worker, Worker, Role, Role, Workload, float]], exact: bool) -> list[Prediction]:
    preds: list[Prediction | None] = [None] * len(cases)
    rows, live = [], []
    for i, case in enumerate(cases):
        row = _disagg_row(*case)
        if isinstance(row, Prediction):
            preds[i] = row
        else:
            rows.append(row)
            live.append(i)
    if not live:
        return preds  # type: ignore[return-value]
    c = _pack([(cases[i][1], cases[i][3], cases[i][4]) for i in live], exact)
    columns = list(zip(*rows))
    cap, lamd, rho_pf, extra, gaps = (np.array(columns[k], float) for k in (0, 1, 2, 4, 5))
    spreads = np.array(columns[3], float).T  # the prefill's mean, CV and quantiles (in PERCENTILES' order)
    service, service_cv, service_q = spreads[0], spreads[1], spreads[2:]
    c.lamd = lamd

    def rate_held(cs: _Cases, b: np.ndarray) -> np.ndarray:
        """`disagg`'s decode fixed point: the sequences in a group's batch when b are."""
        return cs.lamd * cs.osl * (_step(cs, b, cs.ctx) / cs.accept)

    b = _least_fixed_point(rate_held, c, cap)
    code = np.where((rho_pf >= 1) | (b > cap), _OVER, _STABLE)
    ok = np.flatnonzero(code == _STABLE)
    s = c.take(ok)
    b_ok, cap_ok, tpot_mean = b[ok], cap[ok], _step(s, b[ok], s.ctx) / s.accept
    slot = _slot_wait(s.lamd, cap_ok, (s.osl - 1) * tpot_mean, s.osl_cv)
    sd = _batch_sd(s.lamd, b_ok, _step(s, b_ok + 1, s.ctx) / s.accept - tpot_mean, s.osl)
    code[ok] = np.where(~np.isfinite(slot[0]), _SLOTS, np.where(~np.isfinite(sd), _GROWING, _STABLE))
    rho_ok = rho_pf[ok]
    wait = _kingman_wait(rho_ok, service[ok], s.arrival_cv, service_cv[ok])
    ttft = _queue_percentiles(service[ok], wait, rho_ok, extra[ok], np.zeros(ok.size), service_q[:, ok],
                              service_cv[ok])
    itl = np.empty_like(ttft)
    itl[0] = tpot_mean
    itl[1:] = _step(s, b_ok + np.array(_Z_UP)[:, None] * sd, s.ctx) / s.accept
    tpot = np.empty_like(ttft)
    tpot[0] = tpot_mean + slot[0] / np.maximum(s.osl - 1, 1.0)
    for k, q in enumerate(_Q):
        tpot[k + 1] = itl[k + 1] + _slot_quantile(slot[1], slot[2], q) / gaps[ok]
    e2e = _e2e(ttft, itl, s.osl, s.osl_cv, slot)
    # The busiest queue's load, where the slots or the batch's growth end a case: the decode batch's alone.
    load = np.where((code == _SLOTS) | (code == _GROWING), b / cap, np.maximum(rho_pf, b / cap))
    ttfts, tpots, itls, e2es = (list(_dicts(m)) for m in (ttft, tpot, itl, e2e))
    at = dict(zip(ok.tolist(), range(ok.size)))
    for j, (i, row) in enumerate(zip(live, rows)):
        workers = {"prefill": row[6], "decode": row[7]}
        k = int(code[j])
        if k != _STABLE:
            preds[i] = serving._unstable(workers, float(load[j]), _DISAGG_NOTES[k])
            continue
        m = at[j]
        wl = cases[i][4]
        preds[i] = _prediction(ttfts[m], tpots[m], itls[m], e2es[m], wl.rate, wl.rate * wl.osl, float(b[j]),
                               float(load[j]), True, workers, list(row[8]))
    return preds  # type: ignore[return-value]


_DISAGG_NOTES = {
    _OVER: "arrival rate exceeds what the workers sustain",
    _SLOTS: "arrival rate exceeds what the decode batch slots sustain",
    _GROWING: "arrival rate is past the point where the decode batch keeps growing",
}
"""The notes of `serving.disagg`'s unstable open-loop results, word for word."""


def predict_open_disagg(cases: Sequence[tuple[Worker, Worker, Role, Role, Workload, float]], *,
                        exact: bool = False) -> list[Prediction]:
    """`[serving.disagg(wp, wd, prefill, decode, wl, link) for wp, wd, prefill, decode, wl, link in cases]` for
    open loops, all at once, as `predict_open_agg` does for aggregated ones (the same `exact`): what each case
    computes once is the scalar code's (`_disagg_row`), the decode batch's fixed point, the slot wait, the batch's
    spread and the percentiles are solved over all the cases together."""
    if not cases:
        return []
    with collector_paused(), np.errstate(all="ignore"):
        return _disagg(cases, exact)


__all__ = ["predict_open_agg", "predict_open_disagg"]
