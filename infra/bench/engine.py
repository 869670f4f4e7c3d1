"""One serving engine's scheduler in virtual time: continuous batching as vLLM (V1) and SGLang run it.

An `Engine` is one attention group of one worker (a replica's engine instance; a worker with attention data
parallelism is that many engines). Each step it schedules, in this order:
1. every decoding sequence, one token each (decode first);
2. prompts already admitted but not finished (chunked prefill), in admission order, within the step's token
   budget (`max_num_batched_tokens`);
3. waiting requests, first come first served, while the budget, the batch cap (`max_num_seqs`) and the KV cache
   allow; a prompt's prefix found in the prefix cache is not computed again.
The KV cache holds `kv_tokens` tokens, charged per token (a request's partly filled last block of `block_size`
is not charged; prefix-cache hits are whole blocks); when decoding sequences outgrow it, the most recently
admitted request is preempted and later recomputed (vLLM's recompute preemption). The step's duration is
the performance model's `Worker.step` for that batch, the same function the analytic prediction uses, so the two
differ only in queueing and batching dynamics.

API (used by the simulator and by the emulated endpoint):

    model = EngineModel.from_worker(worker, max_num_seqs=..., max_num_batched_tokens=..., kv_tokens=...)
    engine = Engine(model, role="agg")          # or "prefill" / "decode" for P/D disaggregation
    engine.rejects(req)                         # why a request can never run here (too long), else None
    engine.add(SimRequest(id, input_tokens, output_tokens, ...), now)
    result = engine.step(now)                   # None when idle; else StepResult: duration (s), steps,
                                                # tokens [(id, tokens emitted, finished)], first, done
    engine_for(plan, service, allocation_index, role="agg", catalog=None) -> Engine

`step` runs one engine step. The simulator instead calls `begin(now, max_steps)` to plan a run of identical
decode steps (nothing joins or leaves the batch in between), `cut(t)` when a request arrives during that run (the
step in flight completes, the rest is dropped), and `finish()` to apply it: one event per batch change rather
than one per token. Times the engine does not model itself are on the model for the caller to add: the fixed
per-request latency before a request reaches the scheduler (`request_s`, HTTP and tokenisation) and, for
disaggregated workers, the KV-cache hand-off from prefill to decode (`transfer_s(input_tokens)`).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from infra.catalog.loader import load_catalog
from infra.errors import CatalogError, InfraError, Location, Problem
from infra.perf.estimate import ShapeError, build_workers
from infra.perf.shape import Deployment, Parallel, Role
from infra.planner.candidates import slice_device

BLOCK_SIZE = 16
"""Tokens per KV-cache block (vLLM's default); prefix-cache hits are whole blocks."""

WAITING, PREFILLING, DECODING, DONE = 0, 1, 2, 3

StepFn = Callable[[float, float, float, float], float]
"""(decoding sequences, their mean context, prefill tokens, mean context those see) -> seconds."""


@dataclass(slots=True, eq=False)
class SimRequest:
    """A request inside an engine. The first fields describe it; the rest is the engine's bookkeeping."""

    id: int
    input_tokens: int
    output_tokens: int
    prefix_group: int = -1
    prefix_tokens: int = 0
    """Leading prompt tokens shared with every request of the same prefix group."""
    generated: int = 0
    """Tokens emitted so far (a request arriving at a decode worker brings its first one)."""
    state: int = WAITING
    computed: int = 0
    """Tokens whose KV this residency has computed (or found in the prefix cache)."""
    target: int = 0
    """Tokens whose KV must exist before the next token: the prompt, plus the output so far after a preemption."""
    kv: int = 0
    """KV tokens held (for a decoding request: when it entered decode)."""
    seq: int = 0
    """Admission order (the last admitted is preempted first)."""
    s_entry: int = 0
    """The engine's decode-step counter when this request entered decode."""
    epoch: int = 0
    cached_tokens: int = 0
    """Prompt tokens found in the prefix cache at the last admission."""
    preemptions: int = 0
    first_token: float | None = None
    last_token: float = 0.0
    context: Any = None
    """Whatever the caller wants to carry along (the simulator's record, the emulator's stream)."""
    entry: int = -1
    """The router slot of the entry engine that took the request, held until the request has finished (a
    disaggregated request's prefill engine keeps counting it while it decodes elsewhere)."""


@dataclass(frozen=True)
class EngineModel:
    """What an engine is: its step-time function, its limits and the latencies around it."""

    step_fn: StepFn
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_tokens: int
    """KV-cache capacity of the attention group in tokens."""
    max_model_len: int | None = None
    chunked_prefill: bool = True
    prefix_caching: bool = True
    block_size: int = BLOCK_SIZE
    accept: float = 1.0
    """Tokens a decode step emits per sequence on average (speculative decoding), applied to pure decode steps."""
    request_s: float = 0.0
    """Fixed latency of a request before the scheduler sees it (HTTP, tokenisation, admission)."""
    transfer_fixed_s: float = 0.0
    """Fixed cost of handing a request from prefill to decode workers."""
    kv_bytes_per_token_s: float = 0.0
    """Seconds one prompt token's KV cache takes over the prefill-to-decode link."""

    def transfer_s(self, input_tokens: int) -> float:
        """Time to move one request's KV cache from a prefill worker to a decode worker."""
        return self.transfer_fixed_s + input_tokens * self.kv_bytes_per_token_s

    @classmethod
    def from_worker(cls, worker: Any, **settings: Any) -> EngineModel:
        """An engine stepping as the performance model's compiled `Worker` prices it, with its factors'
        per-request, transfer and speculative-decoding figures unless `settings` give them."""
        f = worker.factors
        settings.setdefault("request_s", worker.request_s())
        settings.setdefault("transfer_fixed_s", f.transfer_ms * 1e-3)
        settings.setdefault("accept", f.accept)
        return cls(step_fn=worker.step, **settings)


@dataclass
class StepResult:
    """One planned run of engine steps and what it emitted at its end (`duration` after it began)."""

    start: float
    duration: float
    steps: int
    step_s: float
    """Duration of each step of the run."""
    decoding: int
    """Sequences that emitted a decode token in every step of the run."""
    gaps: int = 0
    """Inter-token gaps of one step's length the run produced (decoding x steps, less the `resumed` ones)."""
    tokens: list[tuple[int, int, bool]] = field(default_factory=list)
    """(request id, tokens emitted, finished) for every request that emitted (only when detailed)."""
    first: list[SimRequest] = field(default_factory=list)
    """Requests whose first token came out at the end of this run."""
    done: list[SimRequest] = field(default_factory=list)
    """Requests that left the engine: finished, or (prefill role) prefilled and ready to hand over."""
    resumed: list[tuple[SimRequest, float]] = field(default_factory=list)
    """Requests whose token came after a pause (recomputed after a preemption, or a decode worker taking over a
    prefilled request), with the gap since their last token; they are not among `decoding`'s gaps."""
    joined: list[SimRequest] = field(default_factory=list)
    """Decode role: prefilled requests admitted straight into decoding at the start of this run."""

    @property
    def end(self) -> float:
        return self.start + self.duration


class Engine:
    """One attention group's continuous-batching scheduler (see the module docstring)."""

    def __init__(self, model: EngineModel, role: Literal["agg", "prefill", "decode"] = "agg", name: str = ""):
        if model.max_num_seqs < 1 or model.max_num_batched_tokens < 1 or model.kv_tokens < 1:
            raise InfraError(Problem(f"engine {name or role}: max_num_seqs, max_num_batched_tokens and kv_tokens "
                                     "must be at least 1", Location(path=name), "fix the engine settings"))
        self.model = model
        self.role = role
        self.name = name
        self.waiting: deque[SimRequest] = deque()
        self.prefilling: list[SimRequest] = []
        self.running: dict[int, SimRequest] = {}
        """Admitted requests by admission order (dicts keep insertion order; the last is preempted first)."""
        self._heap: list[tuple[int, int, int, SimRequest]] = []
        """Decoding requests by the decode step at which they finish."""
        self.S = 0
        """Decode steps run so far: a decoding request's output is its `generated` + S - `s_entry`."""
        self.n_dec = 0
        self._dec_kv = 0
        self._dec_ctx = 0
        self._kv_pref = 0
        self._seq = 0
        self.cache: OrderedDict[int, int] = OrderedDict()
        """Prefix group -> prompt tokens of it held in the prefix cache, least recently used first."""
        self._pinned: dict[int, int] = {}
        self.preemptions = 0
        self.steps = 0
        self.busy_s = 0.0
        self._plan: StepResult | None = None
        self._now = 0.0
        self._chunks: list[tuple[SimRequest, int]] = []
        self._joined: list[SimRequest] = []

    # -- state -------------------------------------------------------------------------------------------------

    @property
    def kv_used(self) -> int:
        return self._kv_pref + self._dec_kv + self.n_dec * self.S

    @property
    def outstanding(self) -> int:
        """Requests in the engine: waiting or running."""
        return len(self.waiting) + len(self.running)

    @property
    def in_flight(self) -> StepResult | None:
        """The run `begin` planned and `finish` has not applied yet."""
        return self._plan

    def rejects(self, req: SimRequest) -> str | None:
        """Why this engine can never serve the request, else None: a prompt that reaches max_model_len (vLLM
        answers 400), or a request the whole KV cache cannot hold."""
        m = self.model
        if m.max_model_len is not None and req.input_tokens >= m.max_model_len:
            return f"prompt of {req.input_tokens} tokens reaches max_model_len {m.max_model_len}"
        need = req.input_tokens + (min(req.output_tokens, self._room(req)) if self.role != "prefill" else 1)
        if need > m.kv_tokens:
            return f"request of {need} tokens exceeds the KV cache of {m.kv_tokens} tokens"
        return None

    def _room(self, req: SimRequest) -> int:
        m = self.model
        return req.output_tokens if m.max_model_len is None else m.max_model_len - req.input_tokens

    def add(self, req: SimRequest, now: float) -> None:
        """Queue a request; it joins the batch at the next step that begins at or after `now`. Output beyond
        max_model_len is cut there (the request finishes with reason `length`, as vLLM does). A decode engine
        takes prefilled requests with tokens left to emit (its first came from the prefill worker)."""
        req.state = WAITING
        req.output_tokens = max(1, min(req.output_tokens, self._room(req)))
        if self.role == "decode":
            if req.output_tokens <= max(req.generated, 1):
                raise ValueError(f"request {req.id} has no token left to decode; finish it at the prefill worker")
            # The prompt's KV cache came with it from a prefill worker, and so did its first token.
            req.generated = max(req.generated, 1)
            req.target = req.input_tokens
        else:
            req.target = req.input_tokens + req.generated
        self.waiting.append(req)

    # -- scheduling --------------------------------------------------------------------------------------------

    def _gen(self, req: SimRequest) -> int:
        return req.generated + self.S - req.s_entry

    def _enter_decode(self, req: SimRequest) -> None:
        req.state = DECODING
        req.s_entry = self.S
        self.n_dec += 1
        self._dec_kv += req.kv - self.S
        self._dec_ctx += req.input_tokens + req.generated - self.S
        heapq.heappush(self._heap, (self.S + req.output_tokens - req.generated, req.seq, req.epoch, req))

    def _leave_decode(self, req: SimRequest) -> None:
        req.generated = self._gen(req)
        req.kv += self.S - req.s_entry
        self.n_dec -= 1
        self._dec_kv -= req.kv - self.S
        self._dec_ctx -= req.input_tokens + req.generated - self.S

    def _release(self, req: SimRequest) -> None:
        del self.running[req.seq]
        g = req.prefix_group
        if g >= 0 and g in self._pinned:
            self._pinned[g] -= 1
            if not self._pinned[g]:
                del self._pinned[g]

    def _preempt_last(self) -> bool:
        if not self.running:
            return False
        req = self.running[next(reversed(self.running))]
        if req.state == DECODING:
            self._leave_decode(req)
            req.epoch += 1
            # It decoded in every step up to this one.
            req.last_token = self._now
        else:
            self.prefilling.remove(req)
            self._kv_pref -= req.kv
            self._chunks = [(r, n) for r, n in self._chunks if r is not req]
        self._release(req)
        req.state, req.computed, req.kv = WAITING, 0, 0
        req.target = req.input_tokens + req.generated
        req.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(req)
        return True

    def _prefix_hit(self, req: SimRequest, free: int) -> int:
        m = self.model
        if not m.prefix_caching or req.prefix_group < 0 or req.prefix_tokens <= 0:
            return 0
        # Cached prefixes live in free blocks; those no running request holds are evicted, least recently used
        # first, when the free space cannot hold them all.
        unpinned = [g for g in self.cache if g not in self._pinned]
        held = sum(self.cache[g] for g in unpinned)
        for g in unpinned:
            if held <= free:
                break
            held -= self.cache.pop(g)
        got = self.cache.get(req.prefix_group, 0)
        if not got:
            return 0
        self.cache.move_to_end(req.prefix_group)
        hit = min(req.prefix_tokens, got, req.target - 1)
        return max(hit, 0) // m.block_size * m.block_size

    def _schedule(self) -> tuple[int, int, float]:
        """Admit and reserve this step's work; (prefill tokens, decoding sequences, mean prefill context)."""
        m = self.model
        cap = m.kv_tokens
        # Decoding sequences each need one more KV slot this step; the last admitted make room.
        while self.n_dec and self.kv_used + self.n_dec > cap:
            self._preempt_last()
        if not self.prefilling and not self.waiting:
            self._chunks = []
            return 0, self.n_dec, 0.0
        budget = m.max_num_batched_tokens - self.n_dec
        self._chunks = chunks = []
        for req in list(self.prefilling):
            if budget <= 0:
                break
            if req.state != PREFILLING:
                continue
            need = req.target - req.computed
            n = min(need, budget) if m.chunked_prefill else (need if need <= budget or not chunks else 0)
            while n and self.kv_used + n > cap and next(reversed(self.running)) != req.seq:
                self._preempt_last()
            n = min(n, cap - self.kv_used)
            if n <= 0:
                break
            req.kv += n
            self._kv_pref += n
            chunks.append((req, n))
            budget -= n
        while self.waiting and budget > 0 and len(self.running) < m.max_num_seqs:
            req = self.waiting[0]
            free = cap - self.kv_used
            if self.role == "decode":
                if req.target + 1 > free:
                    break
                self.waiting.popleft()
                self._admit(req)
                req.computed = req.kv = req.target
                self._enter_decode(req)
                self._joined.append(req)
                continue
            hit = self._prefix_hit(req, free)
            need = req.target - hit
            if m.chunked_prefill:
                n = min(need, budget)
            elif need <= budget or (not chunks and self.n_dec == 0):
                n = need
            else:
                break
            if hit + n > free:
                break
            self.waiting.popleft()
            self._admit(req)
            req.cached_tokens = hit
            req.computed = hit
            req.kv = hit + n
            req.state = PREFILLING
            self.prefilling.append(req)
            self._kv_pref += req.kv
            chunks.append((req, n))
            budget -= n
        tokens = sum(n for _, n in chunks)
        ctx = sum(n * (r.computed + n / 2) for r, n in chunks) / tokens if tokens else 0.0
        return tokens, self.n_dec, ctx

    def _admit(self, req: SimRequest) -> None:
        self._seq += 1
        req.seq = self._seq
        self.running[req.seq] = req
        g = req.prefix_group
        if g >= 0:
            self._pinned[g] = self._pinned.get(g, 0) + 1

    def _clean_heap(self) -> None:
        heap = self._heap
        while heap and (heap[0][3].state != DECODING or heap[0][2] != heap[0][3].epoch):
            heapq.heappop(heap)

    def begin(self, now: float, max_steps: int = 1) -> StepResult | None:
        """Plan the next run of steps starting at `now`: one step, or up to `max_steps` identical decode steps
        when no prompt is being computed. None when there is nothing to run."""
        assert self._plan is None, "finish() the running step first"
        m = self.model
        self._now = now
        prefill, n_dec, pctx = self._schedule()
        if not prefill and not n_dec:
            return None
        mean_ctx = (self._dec_ctx + n_dec * self.S) / n_dec if n_dec else 0.0
        k = 1
        if not prefill and max_steps > 1:
            self._clean_heap()
            k = min(max_steps, self._heap[0][0] - self.S, (m.kv_tokens - self.kv_used) // n_dec)
            k = max(k, 1)
        # Contexts grow by one token a step; pricing the run at its middle context is exact for the linear terms.
        d = m.step_fn(float(n_dec), mean_ctx + (k - 1) / 2, float(prefill), pctx)
        if not prefill:
            d /= m.accept
        self._plan = StepResult(now, k * d, k, d, n_dec, joined=self._joined)
        self._joined = []
        return self._plan

    def cut(self, t: float) -> float:
        """Shorten the planned run to the steps that have begun by `t` (the one in flight completes); its new
        end time."""
        plan = self._plan
        assert plan is not None
        if plan.steps > 1:
            # A request arriving exactly at a step boundary joins the step that begins there.
            j = max(1, min(plan.steps, math.ceil((t - plan.start) / plan.step_s - 1e-9)))
            plan.steps, plan.duration = j, j * plan.step_s
        return plan.end

    def finish(self, detail: bool = False) -> StepResult:
        """Apply the planned run: emit its tokens at its end. `detail` lists every request's tokens."""
        plan = self._plan
        assert plan is not None
        self._plan = None
        end = plan.end
        k = plan.steps
        self.steps += k
        self.busy_s += plan.duration
        if detail:
            plan.tokens = [(r.id, k, False) for r in self.running.values() if r.state == DECODING]
        self.S += k
        plan.gaps = plan.decoding * k
        for req in plan.joined:
            if req.state == DECODING:
                plan.resumed.append((req, plan.start + plan.step_s - req.last_token))
                plan.gaps -= 1
        heap = self._heap
        while heap:
            s_fin, _, epoch, req = heap[0]
            if req.state != DECODING or epoch != req.epoch:
                heapq.heappop(heap)
                continue
            if s_fin > self.S:
                break
            heapq.heappop(heap)
            self._leave_decode(req)
            self._finish(req, end, plan)
        for req, n in self._chunks:
            if req.state != PREFILLING:
                continue
            req.computed += n
            if req.computed < req.target:
                continue
            self.prefilling.remove(req)
            self._kv_pref -= req.kv
            if self.model.prefix_caching and req.prefix_group >= 0 and req.prefix_tokens > 0:
                g = req.prefix_group
                self.cache[g] = max(self.cache.get(g, 0), req.prefix_tokens)
                self.cache.move_to_end(g)
            req.generated += 1
            if detail:
                plan.tokens.append((req.id, 1, req.generated >= req.output_tokens or self.role == "prefill"))
            if req.first_token is None:
                req.first_token = end
                plan.first.append(req)
            else:
                plan.resumed.append((req, end - req.last_token))
            if req.generated >= req.output_tokens or self.role == "prefill":
                req.kv = 0
                self._finish(req, end, plan)
            else:
                req.last_token = end
                self._enter_decode(req)
        self._chunks = []
        if detail and plan.done:
            finished = {r.id for r in plan.done}
            plan.tokens = [(i, n, f or i in finished) for i, n, f in plan.tokens]
        return plan

    def _finish(self, req: SimRequest, end: float, plan: StepResult) -> None:
        req.state = DONE
        req.last_token = end
        self._release(req)
        plan.done.append(req)

    def step(self, now: float) -> StepResult | None:
        """Run one engine step from `now`: None when idle, else what it emits at `now + duration`."""
        if self.begin(now, 1) is None:
            return None
        return self.finish(detail=True)


def engine_model(plan: Any, service: str, allocation: int, role: str = "agg", catalog: Any = None,
                 calibration: Any = None, workload: Any = None) -> EngineModel:
    """The engine model of one role of a plan's allocation: the performance model's worker for that shape (on the
    pool's memory, or a device slice) with the engine settings the plan records. With the user's `calibration`
    (`infra.perf.correction.UserCalibration`) its steps take the corrected time for this deployment under
    `workload` (a `Workload` of the run's mean lengths), and the fixed latency before a request is scheduled
    grows (or shrinks) so that a request alone sees the corrected TTFT."""

    svc, alloc = plan_allocation(plan, service, allocation)
    if role not in alloc.engines:
        raise InfraError(Problem(f"allocation {allocation} of service {service} has no {role} engine (it has "
                                 f"{', '.join(sorted(alloc.engines))})", Location(path=f"spec.services.{service}"),
                                 "use role " + " or ".join(sorted(alloc.engines))))
    catalog = catalog or load_catalog()
    index = [s.name for s in plan.spec.services].index(service)

    def at(*path: str | int) -> Location:
        full = ("spec", "services", index, *path)
        return plan.locate(full) if hasattr(plan, "locate") else Location(path=".".join(map(str, full)))

    # What the plan names must be in the catalog; a name it lacks is told at the plan's line that gives it.
    for kind, name, where in (("model", svc.model, ("model",)), ("device", alloc.device, ("allocations", allocation,
                              "device")), ("device", alloc.decode_device, ("allocations", allocation, "decode_device")),
                              ("framework", alloc.framework, ("allocations", allocation, "framework"))):
        try:
            if name is not None or kind == "model":
                getattr(catalog, kind)(name or "")
        except CatalogError as exc:
            raise CatalogError([Problem(p.message, at(*where), p.fix) for p in exc.problems]) from None
    par = Parallel(**alloc.parallel.model_dump())
    decode_par = Parallel(**alloc.decode_parallel.model_dump()) if alloc.decode_parallel is not None else par
    roles = {name: Role(decode_par if name == "decode" else par, batch_cap=e.max_num_seqs, workers=1,
                        max_num_tokens=e.max_num_batched_tokens)
             for name, e in alloc.engines.items()}
    engine = alloc.engines[role]
    dep = Deployment(svc.model, alloc.device, alloc.framework, alloc.precision, alloc.mode,
                     agg=roles.get("agg", Role(par)), prefill=roles.get("prefill", Role(par)),
                     decode=roles.get("decode", Role(decode_par)), decode_device=alloc.decode_device,
                     kv_precision="fp8" if engine.kv_cache_dtype == "fp8" else "bf16",
                     memory_utilization=engine.memory_utilization)
    pools = {p.name: p for p in plan.spec.cluster.pools}
    pool = pools.get(alloc.pool)
    share = alloc.share or 1.0
    memory = pool.device_memory_gb * share if pool is not None else None
    device = catalog.device(alloc.device)
    spec = slice_device(device, share) if share < 1 else None
    cross: dict[str, Any] = {}
    if alloc.decode_pool is not None and alloc.decode_pool in pools and pool is not None:
        other = pools[alloc.decode_pool]
        # The KV cache crosses the slower of the two pools' fastest NICs (Gb/s in the plan, GB/s here).
        nics = [max((n.bandwidth_gbps for n in p.nics), default=0.0) for p in (pool, other)]
        cross = {"decode_memory_gb": other.device_memory_gb, "link_gbs": min(nics) / 8 if all(nics) else None}
    correction = calibration.correction(dep, workload) if calibration is not None else None
    try:
        workers, cal, link = build_workers(dep, catalog, device_memory_gb=memory, device_spec=spec,
                                           correction=correction, **cross)
    except ShapeError as exc:
        # The performance model speaks of "the deployment" (`deployment.decode`: its decode workers); here that is
        # this allocation of the plan, so each problem is told at the allocation's layout in the plan file.
        def layout(p: Problem) -> Location:
            decode = p.location.path == "deployment.decode" and alloc.decode_parallel is not None
            return at("allocations", allocation, "decode_parallel" if decode else "parallel")

        raise ShapeError([Problem(p.message, layout(p), p.fix) for p in exc.problems]) from None
    worker = workers[role]
    per_token = kv_seconds_per_token(worker, link) if role == "prefill" else 0.0
    settings: dict[str, Any] = {}
    if cal.ttft != 1.0 and role != "decode" and workload is not None:
        # An unloaded request's first token: its fixed latency and its prompt's prefill, stretched by the TTFT
        # correction; the stretch is carried by the fixed latency, as the prefill's own steps already run at the
        # corrected step time.
        prefill = worker.step(0.0, 0.0, workload.isl, workload.isl / 2)
        settings["request_s"] = max(0.0, cal.ttft * (worker.request_s() + prefill) - prefill)
    return EngineModel.from_worker(worker, **settings, max_num_seqs=engine.max_num_seqs,
                                   max_num_batched_tokens=engine.max_num_batched_tokens,
                                   kv_tokens=engine.kv_cache_tokens, max_model_len=engine.max_model_len,
                                   chunked_prefill=engine.chunked_prefill, prefix_caching=engine.prefix_caching,
                                   kv_bytes_per_token_s=per_token)


def kv_seconds_per_token(worker: Any, link: float) -> float:
    """Seconds one prompt token's KV cache, from every device of a prefill `worker`, takes over a prefill-to-decode
    link of `link` bytes/s."""
    return worker.memory.kv_bytes_per_token * worker.parallel.devices / max(link, 1.0)


def plan_allocation(plan: Any, service: str, allocation: int) -> tuple[Any, Any]:
    """(service plan, allocation) of a DeploymentPlan, or a clear error naming what exists."""
    names = [s.name for s in plan.spec.services]
    if service not in names:
        raise InfraError(Problem(f"the plan has no service {service!r} (it has {', '.join(names)})",
                                 Location(path="spec.services"), "give one of those names"))
    svc = plan.spec.services[names.index(service)]
    if not 0 <= allocation < len(svc.allocations):
        raise InfraError(Problem(f"service {service} has {len(svc.allocations)} allocations; there is no "
                                 f"allocation {allocation}", Location(path=f"spec.services.{service}.allocations"),
                                 f"use an index from 0 to {len(svc.allocations) - 1}"))
    return svc, svc.allocations[allocation]


def engine_for(plan: Any, service: str, allocation: int, role: str = "agg", catalog: Any = None) -> Engine:
    """The engine of one worker (one attention group) of a plan's allocation, priced by the performance model
    with the engine settings the plan records for `role` (`agg`, `prefill` or `decode`)."""
    return Engine(engine_model(plan, service, allocation, role, catalog), role=role,  # type: ignore[arg-type]
                  name=f"{service}/{allocation}/{role}")


__all__ = ["BLOCK_SIZE", "Engine", "EngineModel", "SimRequest", "StepResult", "engine_for", "engine_model",
           "plan_allocation"]
