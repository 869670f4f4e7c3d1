"""From step times to request latencies: continuous batching under a closed or an open loop.

Closed loop (N clients, each sending when its last reply is done; how benchmarks such as the calibration set are
run), solved by Little's law N = B + X TTFT for the decoding count B, with X the throughput that keeps B decoding
(B = X (osl - 1) TPOT):
- TPOT: the mean engine step of the per-group batch at the mean context (prompt + half the output), the prompts
  riding in the same steps as the decodes (chunked prefill): the tokens that arrive during a step (X x prompt x
  step time) share it, so they cost what they add to a mixed step, not a step of their own;
- TTFT: the request's own prefill, the wait for the running step, and an M/D/1 queue behind other prefills; a
  share (`queue`) of the requests belongs to the first wave, when every client starts at once and prefills queue in
  chunks: they lift the mean and make the tail percentiles (a mixture of the steady state and the wave);
- when the KV cache or the batch cap holds fewer sequences than there are clients, the rest queue: throughput is
  cap / (prefill + decode time of one request), and by Little's law E2E = N / throughput. Clients with fixed
  lengths stay in step, so the cache must hold each at its full length (prompt + output) at once;
- a step's token budget counts its decodes first: once prompts wait for the rest of it, every step is full and
  the throughput stops there, whatever the clients; the clients over it wait to be prefilled;
- attention-DP engines that balance prompts across ranks (TRT-LLM's `enable_balance`) hold a new prompt for some
  decode steps while every rank is busy (`balance_steps`), and a scheduler that polls for new requests only every
  N decode steps (SGLang's `--scheduler-recv-interval`) leaves one unseen for N/2 of them (`poll_steps`); both
  are off in the engines this product renders.

Open loop (Poisson or gamma arrivals at a rate): the decode batch B solves B = rate x time in system; each step
also prefills the tokens that arrived during it. The prefill queue is a G/G/1 queue per attention group (Kingman's
approximation with the arrival variability and that of a prompt's service, priced at the prompt lengths themselves:
`_service_spread`), its waiting-time tail taken as exponential, which with the service's own percentiles gives TTFT
percentiles. Tails beyond the means:
- chunked prefill: prompts ride in decode steps in chunks of the step budget, so a share of the steps are slow;
  from the prompt-length distribution, the rate of whole-chunk and partial-chunk steps and their durations give
  ITL percentiles (a gap is one step); a request's TPOT is slow when more requests than usual arrive while it
  decodes (their prompts ride in its steps, they join its batch, and the longer window meets more of them), which
  gives TPOT percentiles from the compound-Poisson quantiles of the prompt tokens a window meets;
- the batch fluctuates around its mean (Poisson), and since a bigger batch steps slower and so holds requests
  longer, the fluctuation is amplified by 1 / (1 - loop gain); near the gain of 1 the load tips over, which is
  where capacity ends before the mean batch reaches the cap. A TPOT percentile takes the token time at that
  percentile of the batch;
- prompts that arrive faster than full steps take them (the budget less the decodes) never settle either;
- batch slots (max_num_seqs, or the KV cache at the mean resident context, which counts long answers more since
  they stay longer) form an M/G/c queue: Erlang C gives the wait of a request that finds the batch full.
E2E percentiles combine TTFT, output length and TPOT as independent parts.

Disaggregated deployments price prefill and decode workers separately and add the KV-cache transfer between
them; in a closed loop the decode batch holds only the clients past their first token (Little's law over the
loop). When worker counts are not given they are sized as a planner would: enough decode groups to hold every
client at the largest batch that fits, and prefill workers to keep up with the decode throughput at 80% load. The
prediction says when it assumed them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

from infra.perf.arch import Worker
from infra.perf.shape import Role, Workload

PERCENTILES = ("p50", "p90", "p95", "p99", "p99.9")
_Z = {"p50": 0.0, "p90": 1.2816, "p95": 1.6449, "p99": 2.3263, "p99.9": 3.0902}
PREFILL_TARGET_LOAD = 0.8
PD_BISECTIONS = 48
"""Bisections of a disaggregated closed loop's TTFT between a prompt alone and one behind every other client's:
to 2^-48 of that span, a fixed count so that the vector path takes the same ones."""
_PHI = statistics.NormalDist()


def z_of(percentile: str) -> float:
    """Standard-normal quantile of a percentile name (`p99.9` -> 3.09)."""
    if percentile in _Z:
        return _Z[percentile]
    q = float(percentile[1:]) / 100
    # Acklam-free: a rational approximation good to 4.5e-4 (Abramowitz & Stegun 26.2.23).
    p = min(q, 1 - q)
    t = math.sqrt(-2 * math.log(p))
    z = t - (2.515517 + 0.802853 * t + 0.010328 * t * t) / (1 + 1.432788 * t + 0.189269 * t * t + 0.001308 * t ** 3)
    return z if q >= 0.5 else -z


def lognormal_q(mean: float, cv: float, z: float) -> float:
    if cv <= 0:
        return mean
    s2 = math.log1p(cv * cv)
    return mean * math.exp(math.sqrt(s2) * z - s2 / 2)


_HERMITE = ((-2.0201828704560856, 0.019953242059045913), (-0.9585724646138185, 0.39361932315224116),
            (0.0, 0.9453087204829419), (0.9585724646138185, 0.39361932315224116),
            (2.0201828704560856, 0.019953242059045913))
"""Gauss-Hermite nodes and weights (five, physicists' form): a lognormal length's expectations in five points."""


def _service_spread(price: Callable[[float], float], isl: float, isl_cv: float,
                    ratios: tuple[tuple[str, float], ...] = ()) -> tuple[float, float, dict[str, float]]:
    """(mean, coefficient of variation, percentiles) of a prompt's service time `price(length)` over the prompt
    lengths: lognormal with mean `isl` and CV `isl_cv` for the moments, the known `ratios` to the mean (else that
    lognormal's) for the percentiles. A prompt's time is not proportional to its length (fixed per-step work,
    weights read whatever the tokens, attention growing with the square of the length), so neither its spread nor
    its tail is the length's: priced at the lengths themselves, the service's variance (what the queue's wait grows
    with) and its percentiles (the service a TTFT percentile rides on) are. Five points reach some ten times the
    mean length at CV 1.2: the moments of the lengths a context window holds, not of the lognormal's unbounded
    tail (which more points would chase: 1.35 at five, 1.44 at twelve, for 3k-token prompts of CV 1.2 on a 32k
    model where the capped lengths' is 1.17)."""
    if isl_cv <= 0:
        one = price(isl)
        return one, 0.0, dict.fromkeys(PERCENTILES, one)
    s2 = math.log1p(isl_cv * isl_cv)
    sd = math.sqrt(s2)
    first = second = 0.0
    for x, weight in _HERMITE:
        t = price(isl * math.exp(sd * math.sqrt(2) * x - s2 / 2))
        first += weight * t
        second += weight * t * t
    first /= math.sqrt(math.pi)
    second /= math.sqrt(math.pi)
    cv = math.sqrt(max(second / (first * first) - 1, 0.0)) if first > 0 else 0.0
    known = dict(ratios)
    quantiles = {q: price(isl * known[q] if q in known else lognormal_q(isl, isl_cv, z_of(q))) for q in PERCENTILES}
    return first, cv, quantiles


@dataclass(frozen=True)
class Prediction:
    """Predicted request metrics of one deployment under one workload (seconds, requests/s)."""

    ttft: dict[str, float]
    tpot: dict[str, float]
    itl: dict[str, float]
    e2e: dict[str, float]
    throughput_rps: float
    output_tokens_per_s: float
    batch: float
    """Mean decode sequences per attention group."""
    load: float
    """Open loop: utilisation of the busiest queue (prefill or KV/batch capacity), 0..1; closed loop: batch / cap."""
    stable: bool
    """False when the load exceeds what the deployment can sustain (latencies then grow without bound)."""
    workers: dict[str, int]
    assumptions: list[str] = field(default_factory=list)


def _unstable(workers: dict[str, int], load: float, note: str) -> Prediction:
    inf = float("inf")
    d = {"mean": inf, **{p: inf for p in PERCENTILES}}
    return Prediction(d, d, d, d, 0.0, 0.0, 0.0, load, False, workers, [note])


def _burst_ttft(w: Worker, n: float, isl_eff: float, isl: float, chunk: int, queue: float) -> tuple[float, float,
                                                                                                      float]:
    """(first, mean, last) completion times of the prefills of n requests arriving together."""
    total = n * isl_eff
    if total <= chunk:
        t = w.step(0.0, 0.0, total, isl / 2)
        return t, t, t
    chunks = total / chunk
    t_chunk = w.step(0.0, 0.0, chunk, isl / 2)
    first = t_chunk * max(1.0, isl_eff / chunk)
    last = t_chunk * chunks
    return first, first + queue * (last - first), last


def _spread(mean: float, first: float, last: float) -> dict[str, float]:
    out = {"mean": mean}
    for p in PERCENTILES:
        q = float(p[1:]) / 100
        out[p] = max(mean if q <= 0.5 and first == last else first + q * (last - first), 0.0)
    out["p50"] = max(out["p50"], min(mean, last))
    # A burst of less than one prompt per group ends before its first chunk would (last < first): no percentile
    # below the one before it.
    for lower, upper in zip(PERCENTILES, PERCENTILES[1:]):
        out[upper] = max(out[upper], out[lower])
    return out


def _wave_mixture(steady: float, share: float, lo: float, hi: float) -> dict[str, float]:
    """TTFT of a closed loop whose clients all start at once: a `share` of the requests belongs to that first wave
    and finds its prefill done anywhere between `lo` and `hi` (uniformly, in the order the prefills run), the rest
    see the steady state. Percentiles invert the mixture's distribution, so with a minority in the wave the median
    is the steady state and the tail is the wave's.

    When the steady state is the slower on average (a queue for batch slots, a backlog of prompts), the wave's
    early finishers count as steady: the mean does not drop below the steady state, while the wave's tail past
    it still shows, so neither moves down as clients are added."""
    span = max(hi - lo, 0.0)
    if (lo + hi) / 2 <= steady:
        s = min(max(steady, lo), hi)
        above = (s * (s - lo) + (hi * hi - s * s) / 2) / span if span > 0 else s
        out = {"mean": (1 - share) * steady + share * max(above, steady)}
        below = 0.0
    else:
        out = {"mean": (1 - share) * steady + share * (lo + hi) / 2}
        # Share of all requests in the wave that finish before the steady state's TTFT.
        below = share * (min(max((steady - lo) / span, 0.0), 1.0) if span > 0 else float(lo < steady))
    for p in PERCENTILES:
        q = float(p[1:]) / 100
        if share <= 0 or below < q <= below + (1 - share):
            out[p] = steady
        else:
            wave_q = (q if q <= below else q - (1 - share)) / share
            out[p] = lo + wave_q * span if below else max(lo + wave_q * span, steady)
    return out


def _own_lengths(ttft: dict[str, float], service: float, service_q: dict[str, float], wait: float,
                 busy: float, most: float) -> dict[str, float]:
    """A closed loop's TTFT (`_wave_mixture`'s, its steady state priced at the mean prompt and the mean wait) with
    each prompt's own prefill at its length and its own wait behind the others' prompts: `service_q`, the
    prefill's percentiles over the prompt lengths (`_service_spread`), less `service`, the prefill the mean TTFT
    was priced with (the mean prompt's in an aggregated loop, the mean over the lengths in a disaggregated one);
    the wait, `wait` on
    average, 0 with probability 1 - `busy` and exponential otherwise (as `_queue_percentiles`'), and no longer
    than `most` (a saturated disaggregated prefill group's: every other client's prompt ahead of it; an aggregated
    loop's is not capped, as its wait is, since its tail would then shrink as clients are added: 57 of
    `benchmarks/monotone.py`'s 21,546 closed-loop steps stepped back, none without). Which prompt is long and which
    waits does not depend on whether it came in the first wave, so the parts combine as `_e2e`'s do, the mean
    plus the root sum of squares of each one's excess over its mean; the mean is unchanged. Without
    them a closed loop of prompts of CV 1 had its steady TTFT p99 at its mean (Llama-3.1-8B on H100, 2000-token
    prompts: 86 ms at one client where the simulator's was 330 ms, now 335 ms)."""
    mean = ttft["mean"]
    out = {"mean": mean}
    for p in PERCENTILES:
        own = service_q[p] - service
        if float(p[1:]) <= 50:
            out[p] = ttft[p] + own
        else:
            tail = 1 - float(p[1:]) / 100
            queued = min((wait / busy) * math.log(busy / tail), most) if busy > tail else 0.0
            out[p] = mean + math.sqrt(max(ttft[p] - mean, 0.0) ** 2 + max(own, 0.0) ** 2
                                      + max(queued - wait, 0.0) ** 2)
    return out


def _closed_steps(w: Worker, b: float, ctx: float, lam: float, busy: float, wl: Workload, chunk: int, tpot: float
                  ) -> tuple[dict[str, float], dict[str, float]]:
    """(ITL, TPOT) percentiles of a closed loop's decoding client, `b` decoding beside it, the other clients'
    prompts arriving at `lam` and finding one waiting with probability `busy`, its mean token time `tpot`: the
    steps that carry their chunks make the ITL's tail, and the more of their prompt tokens a client's answer
    meets the slower its TPOT (`_step_percentiles`, the decode step at the batch its lone step: a closed loop's
    batch is its clients, so arrivals ride in the steps without adding to it). Clients whose lengths all match
    stay in step, their prompts as regular as their cycles; any spread in the lengths dephases them, and the
    prompts of many dephased clients arrive as a Poisson stream. Against the simulator's closed loops (Llama-3.1
    8B and 70B on H100, 2000-token prompts of CV 1 and 200-token answers of CV 0.7, 4 to 64 clients) TPOT p90 and
    p99 come within 6%, ITL p99 within 9%, where both were flat at the mean (TPOT p99 up to 29% under). One client
    meets no prompt but its own, which comes after its answer; once every step is full to its token budget, every
    client's steps are alike."""
    if lam <= 0:
        return _flat(tpot), _flat(tpot)
    f = w.factors
    lone = w.step(b, ctx)
    zero = dict.fromkeys(PERCENTILES, 0.0)
    dephased = 1.0 if wl.dephased else 0.0
    itl, tp = _step_percentiles(tpot, lone, _chunk_steps(w, b, ctx, lam, wl, chunk, busy), wl.osl, wl.osl_cv,
                                f.accept, zero, zero, lam, wl.isl_cv, lone, dephased, closed=True)
    # No answer's token time exceeds the step full to its budget: as the load nears it, the tail closes on it.
    most = max(_full_step(w, b, ctx, wl.isl, chunk) / f.accept, tpot)
    return itl, {k: min(v, most) for k, v in tp.items()}


def _flat(value: float) -> dict[str, float]:
    return {"mean": value, **{p: value for p in PERCENTILES}}


def resident_context(wl: Workload) -> float:
    """Mean context of the sequences in a decode batch. Sequences in a steady stream are at every stage of their
    output, and a long answer stays in the batch longer than a short one (the inspection paradox), so the batch
    holds on average the prompt plus osl (1 + cv^2) / 2 tokens of output."""
    return wl.isl + wl.osl * (1 + wl.osl_cv * wl.osl_cv) / 2


def peak_context(wl: Workload) -> float:
    """Context per sequence the KV cache must hold at once. Closed-loop clients with fixed lengths start together
    and stay in step, so every sequence reaches its full length (prompt + output) at the same time; otherwise
    sequences are at every stage and the mean resident context is what counts."""
    if wl.concurrency is not None and wl.osl_cv == 0:
        return wl.isl + wl.osl
    return resident_context(wl)


KV_HOLD_Z = 2.326
"""The batch a KV cache holds is the one whose sequences' contexts fit it 99% of the time (the normal's 99th
percentile): sequences of varied lengths at every stage of their answers sum to more than their mean as often as
to less, and an engine whose sequences outgrow its cache preempts one and computes it again."""


def context_spread(wl: Workload) -> float:
    """Standard deviation of the context a sequence keeps resident (`peak_context`'s): its prompt's, and the
    answer's tokens so far, uniform over an answer drawn in proportion to its length (a long answer stays longer
    in the batch); clients in step with fixed answers are all at their full length."""
    prompt = wl.isl * wl.isl_cv
    if wl.concurrency is not None and wl.osl_cv == 0:
        return prompt
    b = 1 + wl.osl_cv * wl.osl_cv
    return math.sqrt(prompt * prompt + wl.osl * wl.osl * (b * b * b / 3 - b * b / 4))


def batch_slots(w: Worker, role: Role, wl: Workload) -> int:
    """Sequences one attention group of a decoding (or aggregated) worker runs at once under `wl`: its batch cap,
    or what the KV cache holds at the context each sequence keeps resident, its spread allowed for (`KV_HOLD_Z`).
    The planner renders this as the engine's max_num_seqs, so that the engine runs the batch the prediction
    assumed. Held at the mean context alone, a closed loop of 8k-token prompts (CV 0.5) at 64 clients on
    Llama-3.1-8B (H100) ran 52 sequences on the simulator, preempted 1,448 times in 3,000 requests, and ran TPOT
    26% and throughput 24% off the prediction; at the 45 this holds (and below) it preempts hardly at all and
    both come within 3%."""
    return min(role.batch_cap or 1 << 30, w.max_sequences(peak_context(wl), KV_HOLD_Z * context_spread(wl)))


def _agg_basics(w: Worker, role: Role, wl: Workload) -> tuple[int, int, float, float, float]:
    """(workers, attention groups, prompt tokens to compute, mean context, sequences one group can hold)."""
    workers = role.workers or 1
    isl_eff = wl.isl * (1 - wl.prefix_hit)
    ctx = resident_context(wl)
    cap = batch_slots(w, role, wl)
    return workers, workers * w.parallel.attention_dp, isl_eff, ctx, cap


def _scheduler_hold(w: Worker, step: float, busy: float) -> float:
    """Seconds the scheduler leaves a new prompt waiting while other sequences decode, weighted by `busy`, the
    chance that they do (an idle engine takes a prompt at once): an attention-DP balancer holds it `balance_steps`
    decode steps, and a scheduler that polls for requests only every few steps does not see it for `poll_steps`."""
    steps = w.factors.poll_steps + (w.factors.balance_steps if w.parallel.attention_dp > 1 else 0.0)
    return steps * step * min(max(busy, 0.0), 1.0)


def _full_step(w: Worker, b: float, ctx: float, isl: float, chunk: int) -> float:
    """Seconds of a step full to its token budget: `b` decodes, and prompt tokens in the rest of the budget."""
    return w.step(b, ctx, max(chunk - b, 1.0), isl / 2)


def _chunk_cost(w: Worker, b: float, ctx: float, isl_eff: float, isl: float, chunk: int) -> tuple[float, float, float]:
    """(seconds of a decode step of b sequences, chunks per prompt, seconds a chunk adds to such a step): a prompt
    rides in the room the decoding sequences leave in the step's token budget."""
    base = w.step(b, ctx)
    room = max(chunk - b, 1.0)
    return base, max(1.0, isl_eff / room), w.step(b, ctx, min(isl_eff, room), isl / 2) - base


def _mixed_step(w: Worker, b: float, ctx: float, rate: float, isl_eff: float, isl: float, chunk: int,
                stall: float = 1.0, seen: float = 1.0) -> float:
    """Mean seconds per engine step of a group decoding `b` sequences while prompts arrive at `rate` per second.
    A step's token budget (`chunk`: vLLM's max_num_batched_tokens, TRT-LLM's max_num_tokens) counts the decoding
    sequences' own tokens first; prompts ride in what is left, in chunks of at most that. When fewer than one
    chunk arrives per step, a share of the steps carry a whole chunk and the rest decode alone: with `extra` the
    time a chunk adds to a step, t = base + rate x t x chunks x extra, solved in closed form. Past that, every
    step carries the prompt tokens that arrived during it, t = step(rate x prompt x t), a fixed point started
    from the same line. Infinite when the prompts arrive faster than full steps take them: the backlog of
    prompts then grows without bound, however the other queues look.

    `stall` is how many groups' prompts hold up this group's steps: attention-DP groups step in lockstep (every
    MoE layer exchanges their tokens), so when they are not lined up to prefill together a chunk on any one of
    them lengthens the step for all (`attention_dp_stall`). Their prompts then arrive `stall` times as often as
    the group's own; where that makes more than one chunk per step, every step carries at least one chunk on the
    busiest group, whose own prompt tokens ride as before.

    `seen` weighs the steps that carry a chunk by how many decoding sequences they hold against the others (1: as
    many), for the step time a decoding sequence sees (its TPOT) rather than the engine's mean: in a closed loop
    a prompt's owner is not decoding while it prefills, so its steps hold (c - 1) / c of the decoding clients, and
    one client alone never sees its own prompt in its steps. Where every step carries prompt tokens, the weights
    are the same and so is the step."""
    if rate <= 0:
        return w.step(b, ctx)
    base, chunks, extra = _chunk_cost(w, b, ctx, isl_eff, isl, chunk)
    room = max(chunk - b, 1.0)
    per = min(isl_eff, room)
    load = rate * stall * chunks * extra
    if load < 1:
        t = base / (1 - load)
        share = rate * stall * t * chunks
        if share <= 1:
            if seen == 1:
                return t
            # Every step carrying a chunk (share 1) that holds none of the decodes (one client, whose own prompt it
            # is) leaves them the plain decode step.
            held = 1 - share + share * seen
            return ((1 - share) * base + share * seen * (base + extra)) / held if held > 0 else base
    floor = per if stall > 1 else 0.0
    full = _full_step(w, b, ctx, isl, chunk)
    if rate * isl_eff * full > room:
        return math.inf

    def excess(t: float) -> float:
        """How far a step of t seconds is longer than the step carrying the prompt tokens that arrive during it."""
        return t - w.step(b, ctx, min(max(rate * isl_eff * t, floor), room), isl / 2)

    # The step grows with its prompt tokens along a roofline (flat, then steeper), so the fixed point is found
    # inside its bracket [base, full] by regula falsi, started from the line through a whole chunk: a few plain
    # iterations from there stop short where the line overshoots, and leave a kink in TPOT(b).
    e_base, e_full = excess(base), excess(full)
    if e_base >= 0:
        return base
    if e_full <= 0:
        return full
    slope = rate * isl_eff * extra / per
    start = min(max(base / (1 - slope), base), full) if slope < 1 else full
    return regula_falsi(excess, base, e_base, full, e_full, 1e-9, start)[0]


def closed_loop_agg(w: Worker, role: Role, wl: Workload) -> Prediction:
    f = w.factors
    workers, groups, isl_eff, ctx, cap = _agg_basics(w, role, wl)
    if cap < 1:
        return _unstable({"agg": workers}, float("inf"), "one request does not fit the KV cache")
    c = wl.concurrency / groups
    isl, osl = wl.isl, wl.osl
    chunk = role.max_num_tokens
    req = w.request_s()
    # Attention-DP groups step in lockstep through the shared MoE layers, and the engines line up the groups'
    # prefills in the same steps (TRT-LLM's attention-DP balancing, SGLang's DP attention running every rank in
    # the same forward mode), so a group's steps stall for its own share of the prefill work, not for every
    # group's in turn.
    per = min(isl_eff, chunk)
    chunks = max(1.0, isl_eff / chunk)
    occupy = (w.step(0.0, 0.0, per, isl / 2) - w.fixed_step_s()) * chunks
    decode_steps = max(osl - 1, 1e-9)
    # The other clients are those holding a batch slot but one (the rest wait for a slot and send nothing): their
    # share of the prompts, and, however the queue's load grows, the most a prompt can find ahead of it.
    slotted_clients = min(c, cap)
    others = max(slotted_clients - 1.0, 0.0) / slotted_clients
    most_ahead = max(slotted_clients - 1.0, 0.0) * occupy

    seen_at: dict[tuple[float, float], tuple[float, float, float]] = {}

    def at(x: float, b: float) -> tuple[float, float, float]:
        """(TPOT, TTFT, seconds of a prompt's own steps) at throughput x per group with b sequences decoding.
        Kept by (x, b): the searches below ask again for points they have priced (the throughput a count
        sustains is priced to find it, then read; the count found is a bracket end already priced)."""
        got = seen_at.get((x, b))
        if got is None:
            got = seen_at[x, b] = _at(x, b)
        return got

    def _at(x: float, b: float) -> tuple[float, float, float]:
        rho = min(x * occupy, 0.999)
        base = w.step(b, ctx)
        # A decoding client's steps carry its own token at least, however few decode on average (c = 1). Its own
        # next prompt comes after its answer: the steps carrying a prompt hold the other clients' decodes only.
        tpot = _mixed_step(w, max(b, 1.0), ctx, x, isl_eff, isl, chunk, seen=others) / f.accept
        own = w.step(b, ctx, per, isl / 2) * chunks
        # A group of c clients has c - 1 others decoding while one waits for its first token; the prompts it can
        # find ahead of it are theirs ((c - 1) / c of the load: none at one client), while the queue grows with
        # the whole load.
        ttft = (req + own + min(rho * others / (1 - rho) * occupy / 2, most_ahead) + base / 2
                + _scheduler_hold(w, base, c - 1))
        return tpot, ttft, own

    def sustained(b: float) -> float:
        """The throughput that keeps b sequences decoding, x (osl - 1) TPOT(b, x) = b. Prompts that arrive
        faster lengthen the steps, so one x does; it lies below the rate of steps that carry no prompts."""
        if b <= 0:
            return 0.0

        def over(x: float) -> float:
            tpot = at(x, b)[0]
            return x * decode_steps * tpot - b if math.isfinite(tpot) else math.inf

        # While fewer than one chunk arrives per step, the step a decoding client sees, with a share g of the
        # decodes in the steps that carry a chunk (`others`, see _mixed_step), is base + u base g extra /
        # (1 - u (extra + base (1 - g))), u = x chunks, and x (osl - 1) TPOT / accept = b is a quadratic in u: its
        # smaller root is the throughput (at g = 1, b accept / ((osl - 1) base + b accept chunks extra)). Past
        # that it is the start of the search.
        base, k, extra = _chunk_cost(w, b, ctx, isl_eff, isl, chunk)
        x_hi = b * f.accept / (decode_steps * base)
        need = b * f.accept
        a = decode_steps * base / k
        quad, lin = a * (1 - others) * (extra + base), a + need * (extra + base * (1 - others))
        guess = 2 * need / (lin + math.sqrt(max(lin * lin - 4 * quad * need, 0.0))) / k
        o_guess = over(guess)
        if abs(o_guess) <= 1e-12 * b:
            return guess
        o_hi = over(x_hi)
        # A point as close as the guess must be is the root: the bracket's far end would otherwise creep up on
        # a root found at the near one, halving its way there (40 steps where the root is found in 2).
        return x_hi if o_hi <= 0 else regula_falsi(over, 0.0, -b, x_hi, o_hi, 1e-12, start=guess, tol=1e-12 * b)[0]

    def loop_gap(b: float) -> float:
        x = sustained(b)
        return b + x * at(x, b)[1] - c

    # The steps' token budget: once prompts wait for it, every step is full, its decoding sequences' tokens and
    # the rest prompt tokens, which keeps at most `held` = chunk (osl - 1) / (accept x prompt + osl - 1) sequences
    # decoding: more would finish faster than the prompts left room for could replace them, so no throughput
    # sustains them. Little's law over the whole loop, c = x (TTFT + (osl - 1) TPOT) = b + x TTFT, is solved for
    # the decoding count b up to there, the throughput following from it (solved for the throughput instead, the
    # count is ill-conditioned where the batch is compute-bound, and it jumps where the count a throughput
    # sustains stops existing). When even that count leaves clients over, no more of them raise the throughput:
    # they wait to be prefilled, in their TTFT. (Anderson-Bjorck's scaling of a kept end, `closing`, settles the
    # count in 3.6 points on average where Illinois halving took 4.4: perf_speed's closed loops.)
    held = chunk * decode_steps / (f.accept * isl_eff + decode_steps) if isl_eff > 0 else math.inf
    b = min(c, cap, held)
    g_b = loop_gap(b)
    saturated = b == held and g_b < 0
    if g_b > 0:
        b = regula_falsi(loop_gap, 0.0, -c, b, g_b, 1e-10, closing=True)[0]
    x = sustained(b)
    tpot, ttft_ss, own = at(x, b)
    if saturated:
        ttft_ss = max(ttft_ss, (c - b) / x)
    if c > cap and x * (own + decode_steps * tpot) > cap:
        # The KV cache or batch cap holds fewer sequences than there are clients: the loop runs at the rate that
        # keeps every slot in a prefill or a decode, with the steps slowed by the prompts arriving at that rate
        # (the same curve, so more clients never buy throughput), and the other clients queue for a slot. The
        # slots that hold a prefill are not decoding: the decode batch is what the others leave.
        def slotted(x: float) -> tuple[float, float, float, float]:
            n = cap
            for _ in range(3):
                tpot, ttft, own = at(x, n)
                n = max(cap - x * own, 0.0)
            tpot, ttft, own = at(x, n)
            return tpot, ttft, n, own

        def slots_gap(x: float) -> float:
            tpot, _, _, own = slotted(x)
            return x * (own + decode_steps * tpot) - cap

        x = root_below(slots_gap, 1.0 / occupy if occupy > 0 else 1e9)
        tpot, ttft_ss, b, own = slotted(x)
        ttft_ss = max(ttft_ss, c / x - decode_steps * tpot)
        saturated = False
    first, _, last = _burst_ttft(w, min(c, cap), isl_eff, isl, chunk, 0.5)
    # Benchmarks start every client at once; that first wave's queue of prefills weighs on TTFT.
    ttft = _wave_mixture(ttft_ss, f.queue, req + first, req + last)
    # Each prompt's own prefill at its length, and the wait behind the others' prompts, spread the steady state's
    # TTFT; the prompts riding in a decoding client's steps spread its token times.
    hit = 1 - wl.prefix_hit

    def price(n: float) -> float:
        return w.step(b, ctx, min(n * hit, chunk), n / 2) * max(1.0, n * hit / chunk)

    _, cs, service_q = _service_spread(price, isl, wl.isl_cv, wl.isl_quantiles)
    rho = min(x * occupy, 0.999)
    busy = rho * others
    # The wait's tail takes the prompts' spread as an M/G/1 queue's does ((1 + cs^2) / 2 where the mean, fitted to
    # fixed lengths, takes 1 / 2): a long prompt ahead holds the others longer.
    wait = min(rho * others / (1 - rho) * occupy / 2, most_ahead) * (1 + cs * cs)
    # Each prompt's own prefill against the mean prompt's, which the steady state's TTFT is priced with (not the
    # mean of the prefills over the lengths, which a prompt's attention makes larger: lengths of CV 3 put the
    # median's TTFT below 0).
    ttft = _own_lengths(ttft, price(isl), service_q, wait, busy, math.inf)
    itl, tp = _closed_steps(w, max(b, 1.0), ctx, x * others, busy, wl, chunk, tpot)
    e2e_d = _e2e(ttft, tp, osl, wl.osl_cv)
    if saturated:
        # The binding resource is the steps' token budget, not the batch slots.
        return Prediction(ttft, tp, itl, e2e_d, x * groups, x * groups * osl, b, 1.0, True, {"agg": workers},
                          [budget_full(chunk)])
    return Prediction(ttft, tp, itl, e2e_d, x * groups, x * groups * osl, b, b / cap, True, {"agg": workers})


def budget_full(chunk: int) -> str:
    """The note of a closed loop whose steps' token budget binds."""
    return (f"every step's token budget (max_num_tokens {chunk}) is full: more clients only wait longer for their "
            "first token")


def root_below(gap: Callable[[float], float], hi: float) -> float:
    """The root of an increasing `gap` (negative at 0) in (0, hi], from below: regula falsi over the whole bracket
    to 1e-10, halving where an end's value is not finite (past the rate the steps can carry) and scaling a kept
    end's value by Anderson-Bjorck's factor, which follows the gap's bend towards that rate (the slot-bound loads
    of `benchmarks/perf_speed.py`: 9.3 points on average, 12 at most, where bisecting to a 1e-4 bracket first took
    20.7 and 26). Both regimes of the closed loop are solved this finely so that where one hands over to the other
    the predictions do not step back."""
    lo, hi = regula_falsi(gap, 0.0, gap(0.0), hi, gap(hi), 1e-10, closing=True)
    return lo if lo > 0 else hi


def regula_falsi(g: Callable[[float], float], lo: float, g_lo: float, hi: float, g_hi: float, rel: float,
                 start: float | None = None, steps: int = 40, tol: float = 0.0,
                 closing: bool = False) -> tuple[float, float]:
    """[lo, hi] around the root of an increasing g (g(lo) <= 0 < g(hi)), narrowed to `rel` of hi by regula falsi
    with the Illinois rule (an end kept twice in a row has its value halved, so neither end sticks), from `start`
    when given; it bisects where an end's value is not finite. A point where |g| <= `tol` is the root ((x, x)).
    `closing`: as `regula_falsi_steps`'."""
    search = regula_falsi_steps(lo, g_lo, hi, g_hi, rel, start, steps, closing=closing, tol=tol)
    try:
        x = next(search)
        while True:
            x = search.send(g(x))
    except StopIteration as done:
        return done.value


def regula_falsi_steps(lo: float, g_lo: float, hi: float, g_hi: float, rel: float, start: float | None = None,
                       steps: int = 40, closing: bool = False, tol: float = 0.0
                       ) -> Generator[float, float, tuple[float, float]]:
    """`regula_falsi` as a generator: it yields each point it needs g at and is sent g there, so that a caller
    may evaluate the points of many searches together (`infra.perf.estimate.run_searches`).

    `closing`, for a g that bends sharply towards saturation (a capacity search, where each point is a whole
    prediction and g the worst objective's overrun, `infra.perf.estimate.max_rate_search`; the closed loop's
    decoding count by Little's law and its slot-bound `root_below`): the end kept twice in a row has its value
    scaled by the Anderson-Bjorck factor (how much the replaced end's value fell) rather than halved, which keeps up
    with the bend; and a point closer to an end than the tolerance moves out to it, so that it either closes the
    bracket or halves it rather than creeping up on an end that already meets (or misses) the objectives by a hair.
    On the overrun's shapes that takes a fifth fewer points."""
    side = 0
    x = start
    for _ in range(steps):
        if hi - lo <= rel * hi:
            break
        if x is None or not lo < x < hi:
            finite = math.isfinite(g_lo) and math.isfinite(g_hi) and g_hi > g_lo
            x = (lo * g_hi - hi * g_lo) / (g_hi - g_lo) if finite else (lo + hi) / 2
            if closing:
                x = min(max(x, lo + 0.99 * rel * lo), hi - 0.99 * rel * hi)
            if not lo < x < hi:
                x = (lo + hi) / 2
        g_x = yield x
        if abs(g_x) <= tol:
            return x, x
        if g_x < 0:
            if side < 0:
                g_hi *= _kept_end(g_x, g_lo, closing)
            lo, g_lo, side = x, g_x, -1
        else:
            if side > 0:
                g_lo *= _kept_end(g_x, g_hi, closing)
            hi, g_hi, side = x, g_x, 1
        x = None
    return lo, hi


def _kept_end(new: float, replaced: float, closing: bool) -> float:
    """What the value of an end kept twice in a row is scaled by: a half (Illinois), or where `closing`, how much
    the other end's value fell, 1 - new / replaced (Anderson-Bjorck; a half where that is not positive, and 1 where
    either value is not finite)."""
    if not closing:
        return 0.5
    if not (math.isfinite(new) and math.isfinite(replaced) and replaced != 0):
        return 1.0
    m = 1 - new / replaced
    return m if m > 0 else 0.5


def least_fixed_point(g: Callable[[float], float], top: float, rel: float = 1e-9) -> float:
    """The smallest b in [0, top] with g(b) = b, for an increasing g with g(0) > 0 that may turn infinite past a
    wall; inf when there is none. Plain steps from 0 climb towards it from below, secant steps through them jump
    ahead, and the first step that lands at or past it (or past the wall) brackets it for regula falsi."""
    def over(b: float) -> float:
        v = g(b)
        return b - v if math.isfinite(v) else math.inf

    lo, o_lo = 0.0, over(0.0)
    if o_lo >= 0:
        return 0.0 if math.isfinite(o_lo) else math.inf
    b = min(-o_lo, top)
    for _ in range(100):
        o = over(b)
        if o >= 0:
            if o == 0:
                return b
            left, right = regula_falsi(over, lo, o_lo, b, o, rel)
            # A bracket that closed on the wall holds no point: the count climbs into it.
            return left if math.isfinite(over(right)) else math.inf
        if b >= top:
            return math.inf
        # Below the point: step to g(b), or further along the secant through the last two points.
        ahead = b - o
        if o > o_lo:
            ahead = max(ahead, b - o * (b - lo) / (o - o_lo))
        lo, o_lo, b = b, o, min(ahead, top)
        if b - lo <= rel * b:
            return b
    # Still climbing after that many steps: the count creeps up with no point to settle at (a tangent, in effect).
    return math.inf


def bisect_holds(holds: Callable[[float], bool], hi: float, rel: float) -> tuple[float, float]:
    """(lo, hi) bracketing, to `rel` of hi, where `holds` (true at 0, false from some x on) turns false."""
    lo = 0.0
    for _ in range(64):
        x = (lo + hi) / 2
        if holds(x):
            lo = x
        else:
            hi = x
        if hi - lo < rel * hi:
            break
    return lo, hi


def _kingman_wait(rho: float, service: float, ca: float, cs: float) -> float:
    return (ca * ca + cs * cs) / 2 * rho / (1 - rho) * service


def _queue_percentiles(service_mean: float, wait_mean: float, rho: float, extra: float, service_q: dict[str, float],
                       service_cv: float, phase: float = 0.0) -> dict[str, float]:
    """Service (its own percentiles `service_q`, `_service_spread`) + queueing wait (exponential tail with
    P(wait > 0) = rho) + the wait for the running step to end (uniform over one step). The three are independent,
    so a tail percentile is their means plus the root sum of squares of each one's excess over its mean there (as
    `_e2e` combines its parts), not the sum of their percentiles: that sum describes a request that is at once the
    longest prompt and the unluckiest arrival, which at 1% each is a 1-in-10,000 event, and against an M/G/1
    simulation (tests/unit/test_perf_physics.py) it put the p99 of prompts of length CV 0.43 40% high at 10-30%
    load, where this is within 15%. At or below the median, the service (lognormal with CV `service_cv`) and the
    wait are one distribution (`_quantile_with_wait`); the step's wait adds."""
    mean = extra + service_mean + wait_mean + phase / 2
    out = {"mean": mean}
    for p in PERCENTILES:
        q = float(p[1:]) / 100
        tail = 1 - q
        wait = (wait_mean / rho) * math.log(rho / tail) if rho > tail and rho > 0 else 0.0
        service = service_q[p]
        if q <= 0.5:
            # The service's own percentile less the lognormal's (a priced service, or known lengths, is not
            # lognormal) carries over to the sum.
            z = z_of(p)
            out[p] = extra + _quantile_with_wait(service_mean, service_cv, wait_mean, rho, q, z) + service - \
                lognormal_q(service_mean, service_cv, z) + phase * q
            continue
        excess = math.sqrt(max(service - service_mean, 0.0) ** 2 + max(wait - wait_mean, 0.0) ** 2
                           + (phase * (q - 0.5)) ** 2)
        out[p] = mean + excess
    return out


NEWTON_STEPS = 4
"""Newton steps of `_quantile_with_wait` (in log time, from the middle of its bracket, kept inside it): within 0.7%
of the exact quantile over 20,000 random services, loads and waits, and a fixed count (no test on the error) so
that the vector path takes the same ones."""
_SQRT_2 = math.sqrt(2)
_SQRT_2PI = math.sqrt(2 * math.pi)


def _quantile_with_wait(service_mean: float, service_cv: float, wait_mean: float, rho: float, q: float,
                        z: float) -> float:
    """The q-quantile (`z` its normal score) of a service plus a queueing wait that is 0 with probability 1 - rho
    and exponential otherwise (mean `wait_mean / rho`): the mixture of the service alone and of the service plus
    an exponential wait, each lognormal (the sum by its mean and variance). Percentiles of the parts do not add
    here: below half load the wait's median is 0, yet a third of the requests wait, which lifts the sum's median
    well above the service's (an M/G/1 simulation's median was 18-49% above that at 35-50% load for services of
    CV 0.43-1.2; this is within -13%..+22% of it from CV 0 to 1.2 at every load, `tests/unit/test_perf_physics.py`).
    The root lies between the service's quantile and the longer one's, both closed forms."""
    if rho <= 0 or wait_mean <= 0:
        return lognormal_q(service_mean, service_cv, z)
    theta = wait_mean / rho
    longer = service_mean + theta
    longer_cv = math.hypot(service_cv * service_mean, theta) / longer
    s2b = math.log1p(longer_cv * longer_cv)
    sb = math.sqrt(s2b)
    mub = math.log(longer) - s2b / 2
    if service_cv <= 0:
        return _quantile_fixed_with_wait(service_mean, rho, q, mub, sb)
    s2a = math.log1p(service_cv * service_cv)
    sa = math.sqrt(s2a)
    mua = math.log(service_mean) - s2a / 2
    lo, hi = mua + sa * z, mub + sb * z
    low, high = min(lo, hi), max(lo, hi)
    u = (lo + hi) / 2
    for _ in range(NEWTON_STEPS):
        a, b = (u - mua) / sa, (u - mub) / sb
        cdf = (1 - rho) * 0.5 * math.erfc(-a / _SQRT_2) + rho * 0.5 * math.erfc(-b / _SQRT_2)
        pdf = (1 - rho) * math.exp(-a * a / 2) / (sa * _SQRT_2PI) + rho * math.exp(-b * b / 2) / (sb * _SQRT_2PI)
        if pdf > 0:
            u = min(max(u - (cdf - q) / pdf, low), high)
    return math.exp(u)


def _quantile_fixed_with_wait(service: float, rho: float, q: float, mub: float, sb: float) -> float:
    """`_quantile_with_wait` of a fixed service: its CDF steps from rho Phi to 1 - rho + rho Phi at the service
    (Phi the longer part's, a normal of mean `mub` and deviation `sb` in log time), so the quantile is that step
    or the longer part's own, in closed form."""
    below = rho * _PHI.cdf((math.log(service) - mub) / sb)
    if below >= q:
        return math.exp(mub + sb * _PHI.inv_cdf(q / rho))
    if 1 - rho + below >= q:
        return service
    return math.exp(mub + sb * _PHI.inv_cdf((q - 1 + rho) / rho))


def _erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival finds all `servers` busy (M/M/c, Erlang C) at `offered` = rate x holding time:
    the exact recursion for small c, the Halfin-Whitt limit (within a few percent) for large c."""
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return 1.0
    if servers <= 64:
        blocked = 1.0
        for k in range(1, servers + 1):
            blocked = offered * blocked / (k + offered * blocked)
        return servers * blocked / (servers - offered * (1 - blocked))
    beta = (servers - offered) / math.sqrt(offered)
    if beta > 30:
        return 0.0
    density = math.exp(-beta * beta / 2) / math.sqrt(2 * math.pi)
    below = 0.5 * (1 + math.erf(beta / math.sqrt(2)))
    return 1.0 / (1.0 + beta * below / density)


@dataclass(frozen=True)
class SlotWait:
    """Wait for a batch slot when every one is taken: P(wait > w) = prob x exp(-decay x w)."""

    mean: float = 0.0
    prob: float = 0.0
    decay: float = math.inf

    def quantile(self, q: float) -> float:
        tail = 1 - q
        return math.log(self.prob / tail) / self.decay if self.prob > tail and self.decay < math.inf else 0.0


def _slot_wait(lam: float, slots: float, hold: float, hold_cv: float) -> SlotWait:
    """A group's batch slots (max_num_seqs, or what the KV cache holds) as an M/G/c queue: `slots` servers each
    holding a request for `hold` seconds, arrivals at `lam`/s. The mean batch is lam x hold, but Poisson arrivals
    and unequal output lengths make it fluctuate, and a request that finds the batch full waits for a slot; near
    the cap that wait dominates every latency, so capacity sits below the cap. Erlang C gives the chance of
    waiting, with the M/G/c correction (1 + cv^2) / 2 of the holding time (Lee and Longton) on the wait."""
    if hold <= 0 or lam <= 0 or slots >= 1 << 29:
        return SlotWait()
    offered = lam * hold
    c = max(1, int(slots))
    if offered >= c:
        return SlotWait(math.inf, 1.0, 0.0)
    prob = _erlang_c(c, offered)
    decay = (c - offered) / hold / ((1 + hold_cv * hold_cv) / 2)
    return SlotWait(prob / decay, prob, decay)


CHUNK_POINTS = 8
"""Prompt lengths (midpoints of equal-probability bins of the length distribution) used to find the decode steps
that carry prompt chunks."""
_CHUNK_Z = tuple(z_of(f"p{100 * (i + 0.5) / CHUNK_POINTS:g}") for i in range(CHUNK_POINTS))


def _chunk_steps(w: Worker, b: float, ctx: float, lam: float, wl: Workload, chunk: int, rho: float
                 ) -> list[tuple[float, float]]:
    """(duration, steps per second) of the decode steps of one group that also carry prompt tokens.

    A step's token budget is `chunk`, the decoding sequences' own tokens first; a prompt of L tokens fills
    floor(L / rest) whole steps and one partial step with what is left. That partial step also takes (the start
    of) the next prompt when one is waiting, which an arrival finds with the prefill utilisation `rho`. Prompt
    lengths follow a lognormal of the workload's mean and CV. `lam` is the rate of the prompts whose chunks ride
    in the group's steps: its own, and in an open loop the other attention-DP groups' (`attention_dp_stall`)."""
    rest = max(chunk - b, 1.0)
    isl_eff = wl.isl * (1 - wl.prefix_hit)
    each = lam / CHUNK_POINTS
    full_t = w.step(b, ctx, rest, isl_eff / 2)
    full = 0.0
    out = []
    for z in _CHUNK_Z:
        length = max(lognormal_q(isl_eff, wl.isl_cv, z), 1.0)
        whole = math.floor(length / rest)
        part = length - whole * rest
        full += each * whole
        if part > 0:
            out.append((w.step(b, ctx, part, length / 2), each * (1 - rho)))
            out.append((w.step(b, ctx, min(part + isl_eff, rest), length / 2), each * rho))
    out.append((full_t, full))
    return out


def _batch_sd(lam: float, b: float, slope: float, osl: float) -> float:
    """Standard deviation of the decode batch in sequences, or inf past the tipping point.

    The batch is the number of requests in decode, Poisson around its mean b (variance b). A larger batch makes
    each step slower (`slope` seconds per token per extra sequence), which keeps every request longer and
    makes the batch larger still: the loop gain g = rate x (osl - 1) x slope amplifies the fluctuation by
    1 / (1 - g), and at g = 1 the load tips over. A request decodes for about as long as the batch takes to
    change, so its TPOT keeps the token time of the batch it decodes in rather than averaging it away."""
    gain = lam * max(osl - 1, 0.0) * slope
    if gain >= 1:
        return math.inf
    return math.sqrt(max(b, 0.0)) / (1 - gain)


def _wandering_sd(token_time: Callable[[float], float], lam: float, b: float, osl: float) -> float:
    """`_batch_sd` with the slope taken over the span the batch wanders, one standard deviation each side, that
    span found together with it: the smallest sd with sd = sqrt(b) / (1 - gain over [b - sd, b + sd]). The
    token time has kinks in the batch (where prompt chunks start riding every step), and a slope over one
    sequence on either side of one would make the spread jump as the rate crosses it; over the span the batch
    really covers, a kink weighs in gradually. Infinite when no span holds (the batch keeps growing)."""

    def excess(sd: float) -> float:
        """sd less the spread the slope over [b - sd, b + sd] implies: negative while sd is too small."""
        lo, hi = max(b - sd, 0.0), b + sd
        return sd - _batch_sd(lam, b, (token_time(hi) - token_time(lo)) / (hi - lo), osl)

    lo = math.sqrt(max(b, 1.0))
    g_lo = excess(lo)
    if g_lo >= 0:
        return lo
    hi, g_hi = lo, g_lo
    for _ in range(12):
        hi *= 2
        g_hi = excess(hi)
        if g_hi >= 0:
            break
        lo, g_lo = hi, g_hi
    else:
        return math.inf
    return regula_falsi(excess, lo, g_lo, hi, g_hi, 1e-3)[1]


def _arrivals_quantile(n: float, cv: float, z: float, arrival_cv: float) -> float:
    """Quantile at z of the prompt tokens that arrive in a window where n prompts arrive on average, in mean
    prompts; prompt lengths lognormal with coefficient of variation cv, arrivals a renewal process whose gaps have
    coefficient of variation `arrival_cv` (1: Poisson), so that the tokens' variance is n (arrival_cv^2 + cv^2).
    The larger of two approximations: a gamma matched to that mean, variance and skew (Wilson-Hilferty), which
    holds where many prompts arrive, and one prompt's length at the quantile left once the windows with no
    arrival are set aside, which holds where few do and a single long prompt makes the tail."""
    spread = arrival_cv * arrival_cv + cv * cv
    if spread <= 0 or n <= 0:
        return n
    sd = math.sqrt(n * spread)
    skew = spread ** 1.5 / math.sqrt(n)
    base = 1 - skew * skew / 36 + skew * z / 6
    gamma = max(n + sd * 2 / skew * (base ** 3 - 1), 0.0) if base > 0 else 0.0
    tail = 1 - _PHI.cdf(z)
    some = -math.expm1(-n)
    if tail >= some:
        return gamma
    s2 = math.log1p(cv * cv)
    one = math.exp(math.sqrt(s2) * _PHI.inv_cdf(1 - tail / some) - s2 / 2) if cv > 0 else 1.0
    return max(gamma, one)


def _step_percentiles(t_mean: float, t_decode: float, steps: list[tuple[float, float]], osl: float, osl_cv: float,
                      accept: float, batch: dict[str, float], gap: dict[str, float], lam: float, isl_cv: float,
                      t_lone: float, arrival_cv: float, closed: bool = False
                      ) -> tuple[dict[str, float], dict[str, float]]:
    """(ITL, TPOT) percentiles of a group whose decode steps take `t_decode` seconds except the `steps` that
    carry prompt chunks (their durations, and their relative frequencies), with `batch` the token time and `gap`
    the decode-only gap a percentile of the batch's fluctuation adds to the mean's. A gap is one step, so the
    ITL's tail is the slowest steps' share of all steps.
    A request's TPOT averages its gaps: it is slow when more requests than usual arrive while it decodes, since
    their prompt tokens ride in its steps and they join its batch. They arrive at `lam` per second (gaps of CV
    `arrival_cv`) with lognormal prompt lengths, and what they add is the step time beyond a lone sequence's step
    `t_lone`, a share rho of the mean step; the window stretches with what it meets (a window that meets more
    arrivals lasts longer and meets more still, by 1 / (1 - rho)). Over m gaps of t_mean, n = lam m t_mean
    requests arrive on average, and TPOT at a quantile exceeds the mean by t_mean rho / (1 - rho) (S_q - n) / n,
    with S_q the quantile of their prompt tokens in mean prompts. In a `closed` loop the window does not stretch:
    its prompts come from clients finishing their answers, who advance by steps, so a window of m steps meets as
    many of them however long its steps take."""
    chunk_rate = sum(r for _, r in steps)
    mean_d = sum(d * r for d, r in steps) / chunk_rate if chunk_rate > 0 else t_decode
    delta = max(mean_d - t_decode, 0.0)
    # The share of steps that carry chunks is the one that gives the mean step.
    share = min(max((t_mean * accept - t_decode) / delta, 0.0), 1.0) if delta > 0 else 0.0
    step_mean = t_mean * accept
    rho = min(max((step_mean - t_lone) / step_mean, 0.0), 0.999) if step_mean > 0 else 0.0
    # Short answers have the fewest gaps to average over: E[1/m] of a lognormal output is (1 + cv^2) / mean.
    m = max(osl / (1 + osl_cv * osl_cv) - 1, 1.0)
    n = lam * m * t_mean
    ordered = sorted(steps, reverse=True)
    itl = {"mean": t_mean}
    tpot = {"mean": t_mean}
    floor = 0.0
    for p in PERCENTILES:
        z = max(z_of(p), 0.0)
        tail = 1 - float(p[1:]) / 100
        value, seen = t_decode / accept + gap[p], 0.0
        for d, r in ordered:
            seen += share * r / chunk_rate
            if seen >= tail:
                value = max(d, value)
                break
        itl[p] = value
        more = max(_arrivals_quantile(n, isl_cv, z, arrival_cv) - n, 0.0) / n if n > 0 else 0.0
        excess = (t_mean * rho if closed else t_mean * rho / (1 - rho)) * more
        floor = tpot[p] = max(t_mean + math.hypot(excess, batch[p]), floor)
    return itl, tpot


def _e2e(ttft: dict[str, float], tpot: dict[str, float], osl: float, osl_cv: float,
         wait: SlotWait | None = None) -> dict[str, float]:
    """E2E = TTFT + (output - 1) x TPOT (+ a decode-slot wait), its percentiles from the three roughly
    independent parts: the mean plus the root sum of squares of each part's excess over its own mean at that
    percentile. Adding the parts' percentiles would describe a request that is at once the slowest to start, the
    longest and the slowest to decode, which is far rarer than the percentile asked for."""
    wait = wait or SlotWait()
    mean = ttft["mean"] + (osl - 1) * tpot["mean"] + wait.mean
    out = {"mean": mean}
    for p in PERCENTILES:
        q = float(p[1:]) / 100
        length = lognormal_q(osl, osl_cv, z_of(p))
        if q <= 0.5:
            # (an answer has one token at least: a short, widely spread one's median length is under it)
            out[p] = ttft[p] + (max(length, 1.0) - 1) * tpot["mean"] + wait.quantile(q)
            continue
        excess = math.sqrt(max(ttft[p] - ttft["mean"], 0.0) ** 2 + (max(length - osl, 0.0) * tpot["mean"]) ** 2
                           + ((osl - 1) * max(tpot[p] - tpot["mean"], 0.0)) ** 2
                           + max(wait.quantile(q) - wait.mean, 0.0) ** 2)
        out[p] = mean + excess
    return out


def attention_dp_stall(w: Worker) -> float:
    """Attention-DP groups whose prompts hold up one group's steps in an open loop: all of them. The groups step
    in lockstep (the MoE layers' all-to-all joins them every layer), and the engines this product renders leave
    TRT-LLM's attention-DP balancing off, so prompts reach a group when they arrive and a chunk on any group makes
    the step as long for every one. Counting only a group's own prompts put the capacity of DeepSeek-R1 on 8 B200s
    at attention DP 8 (800-token prompts, 4k answers, TPOT p99 80 ms) at 18 req/s, twice the 8.5 this gives. The
    measured closed loops (`closed_loop_agg`) line their groups' prefills up, and keep their own prompts only."""
    return float(w.parallel.attention_dp)


def open_loop_agg(w: Worker, role: Role, wl: Workload) -> Prediction:
    f = w.factors
    stall = attention_dp_stall(w)
    workers, groups, isl_eff, ctx, cap = _agg_basics(w, role, wl)
    if cap < 1:
        return _unstable({"agg": workers}, float("inf"), "one request does not fit the KV cache")
    lam = wl.rate / groups
    isl, osl = wl.isl, wl.osl
    chunk = role.max_num_tokens
    per = min(isl_eff, chunk)
    chunks = max(1.0, isl_eff / chunk)
    inc = (w.step(0.0, 0.0, per, isl / 2) - w.fixed_step_s()) * chunks
    # A group's own prompts queue for its own prefill; the other attention-DP groups' prompts do not queue with
    # them (each group prefills its own in the same step), they only lengthen its steps (`stall`).
    rho = lam * inc
    if rho >= 1:
        return _unstable({"agg": workers}, rho, "arrival rate exceeds what the replicas sustain")
    walled = False

    def decoding(n: float) -> float:
        """The batch a decoding request's steps carry when n sequences decode on average: itself at least. At a
        trickle the time-averaged count is below 1, and a step priced at it reads a fraction of the routed experts
        one token picks (and of its KV cache); the request's own steps read all of them."""
        return max(n, 1.0)

    def held(n: float) -> float:
        """Sequences in the batch when n are: the rate times each one's time in it (its prefill and decode)."""
        nonlocal walled
        t_n = _mixed_step(w, decoding(n), ctx, lam, isl_eff, isl, chunk, stall)
        walled = walled or not math.isfinite(t_n)
        return lam * ((osl - 1) * t_n / f.accept + w.step(n, ctx, per, isl / 2) * chunks)

    # The batch is the smallest count that holds itself (above it the loop runs away); past four times the slots
    # it is not there to find.
    b = least_fixed_point(held, 4 * cap)
    if not math.isfinite(b):
        if walled:
            return _unstable({"agg": workers}, max(rho, 1.0), "prompts arrive faster than full steps "
                             f"(max_num_tokens {chunk}, less the decoding sequences' tokens) take them")
        return _unstable({"agg": workers}, max(rho, 4.0), "arrival rate exceeds what the replicas sustain")
    step = _mixed_step(w, decoding(b), ctx, lam, isl_eff, isl, chunk, stall)
    own = w.step(b, ctx, per, isl / 2) * chunks
    load = max(b / cap, rho)
    if b > cap:
        return _unstable({"agg": workers}, load, "arrival rate exceeds what the replicas sustain")
    t = step
    # A request holds a batch slot from admission to its last token; when the batch is full it waits before its
    # prefill, which lands in its TTFT. It waits only while every slot is taken, and then the steps are those of a
    # full batch: slots free at the rate a full batch drains them, not at the mean batch's.
    hold = own + (osl - 1) * t / f.accept
    if cap < 1 << 29:
        full = _mixed_step(w, cap, ctx, lam, isl_eff, isl, chunk, stall)
        if math.isfinite(full):
            hold = max(hold, w.step(cap, ctx, per, isl / 2) * chunks + (osl - 1) * full / f.accept)
    slot = _slot_wait(lam, cap, hold, wl.osl_cv)
    if not math.isfinite(slot.mean):
        return _unstable({"agg": workers}, load, "arrival rate exceeds what the batch slots sustain")
    hit = 1 - wl.prefix_hit
    service, cs, service_q = _service_spread(
        lambda n: w.step(b, ctx, min(n * hit, chunk), n / 2) * max(1.0, n * hit / chunk), isl, wl.isl_cv,
        wl.isl_quantiles)
    wait = _kingman_wait(rho, service, wl.arrival_cv, cs)
    # With Poisson arrivals a group is decoding with probability 1 - exp(-b).
    ttft = _queue_percentiles(service, wait, rho, w.request_s() + _scheduler_hold(w, t, -math.expm1(-b)), service_q,
                              cs, phase=t)
    ttft = {k: v + (slot.mean if k == "mean" else slot.quantile(float(k[1:]) / 100)) for k, v in ttft.items()}
    steps = _chunk_steps(w, decoding(b), ctx, lam * stall, wl, chunk, rho)

    def token_time(n: float) -> float:
        """Mean token time at a batch of n: past the point where prompts outrun full steps, every step is full."""
        n = decoding(n)
        t_n = _mixed_step(w, n, ctx, lam, isl_eff, isl, chunk, stall)
        return (t_n if math.isfinite(t_n) else _full_step(w, n, ctx, isl, chunk)) / f.accept

    sd = _wandering_sd(token_time, lam, b, osl)
    if not math.isfinite(sd):
        return _unstable({"agg": workers}, load, "arrival rate is past the point where the batch keeps growing")
    # A percentile's token time is the one at that percentile of the batch (no further than the slots allow),
    # not a line through the mean: the token time bends with the batch.
    mid, lone = token_time(b), w.step(decoding(b), ctx)
    at = {p: min(b + max(z_of(p), 0.0) * sd, max(cap, b)) for p in PERCENTILES}
    batch = {p: token_time(at[p]) - mid for p in PERCENTILES}
    # A gap that carries no prompt chunk is a decode step of the batch at that percentile: what the batch adds
    # to it is the decode step's own growth. The mean token time's growth also carries the prompts riding in the
    # steps, and once the slots cap the batch it would shrink as the mean batch nears them.
    gap = {p: (w.step(decoding(at[p]), ctx) - lone) / f.accept for p in PERCENTILES}
    # The deployment's own replicas share the rate behind the router as the planner's peers do.
    itl, tpot = _step_percentiles(t / f.accept, lone, steps, osl, wl.osl_cv, f.accept, batch, gap, lam * stall,
                                   wl.isl_cv, w.step(1.0, ctx), wl.arrival_cv / math.sqrt(max(wl.peers, workers)))
    e2e = _e2e(ttft, tpot, osl, wl.osl_cv)
    return Prediction(ttft, tpot, itl, e2e, wl.rate, wl.rate * osl, b, load, True, {"agg": workers})


def _kv_transfer(w_prefill: Worker, isl: float, link_bytes_s: float) -> float:
    devices = w_prefill.parallel.devices
    return w_prefill.kv_bytes(isl) * devices / max(link_bytes_s, 1.0)


def _prefill_rate(wp: Worker, isl_eff: float, isl: float, chunk: int) -> float:
    """Requests per second one prefill group completes when kept busy. A prompt computes one token at least, its
    last, whose logits give the first output token, however much of it the prefix cache holds."""
    isl_eff = max(isl_eff, 1.0)
    if isl_eff <= chunk:
        k = max(1, int(chunk // isl_eff))
        return k / wp.step(0.0, 0.0, k * isl_eff, isl / 2)
    return 1.0 / (wp.step(0.0, 0.0, chunk, isl / 2) * isl_eff / chunk)


def _size_decode(wd: Worker, role: Role, wl: Workload) -> tuple[int, float, bool]:
    cap = batch_slots(wd, role, wl)
    if role.workers:
        return role.workers, cap, False
    groups_needed = math.ceil(wl.concurrency / max(cap, 1))
    return max(1, math.ceil(groups_needed / wd.parallel.attention_dp)), cap, True


def _sized_note(prefill_sized: bool, n_p: int, decode_sized: bool, n_d: int, how: str) -> str:
    """Which worker counts the model chose, and which it kept as given."""
    roles = [("prefill", prefill_sized, n_p), ("decode", decode_sized, n_d)]
    chosen = " and ".join(f"{n} {name}" for name, sized, n in roles if sized)
    given = " and ".join(f"{n} {name}" for name, sized, n in roles if not sized)
    return f"worker counts not given: {chosen} worker(s) {how}" + (f" ({given} as given)" if given else "")


def prefill_spread(wp: Worker, wl: Workload) -> tuple[float, float, dict[str, float]]:
    """`_service_spread` of a prefill worker's prompts (alone in their steps) under a workload's lengths, kept on
    the worker (which never changes) by lengths: a capacity search asks for it at every rate it tries."""
    key = (wl.isl, wl.isl_cv, wl.isl_quantiles, wl.prefix_hit)
    kept = wp.__dict__.setdefault("_prefill_spread", {})
    spread = kept.get(key)
    if spread is None:
        hit = 1 - wl.prefix_hit
        spread = kept[key] = _service_spread(lambda n: wp.step(0.0, 0.0, n * hit, n / 2), wl.isl, wl.isl_cv,
                                             wl.isl_quantiles)
    return spread


def _decoding(wd: Worker, c: float, d_groups: float, osl: float, ctx: float, ttft: float, b: float, tpot: float,
              cap: float = math.inf) -> tuple[float, float]:
    """(decode batch, TPOT) of a disaggregated closed loop of `c` clients over `d_groups` decode groups whose
    TTFT is `ttft`, from the batch `b` and its `tpot`: clients waiting for or in their prefill are not decoding,
    so by Little's law the batch is the decode share of each client's loop, b = c (osl - 1) TPOT / E2E per group,
    no more than the `cap` its slots hold (twelve steps at most, to 0.1%)."""
    for _ in range(12):
        b_new = min(c * (osl - 1) * tpot / (ttft + (osl - 1) * tpot) / d_groups, cap)
        done = abs(b_new - b) < 1e-3 * b
        b = b_new
        tpot = wd.token_time(b, ctx)
        if done:
            break
    return b, tpot


def disagg(wp: Worker, wd: Worker, prefill: Role, decode: Role, wl: Workload, link_bytes_s: float) -> Prediction:
    f = wd.factors
    isl, osl = wl.isl, wl.osl
    isl_eff = isl * (1 - wl.prefix_hit)
    ctx = resident_context(wl)
    notes: list[str] = []
    if wl.concurrency is not None:
        n_d, cap, assumed_d = _size_decode(wd, decode, wl)
    else:
        # Open loop: size decode for the rate at the batch cap's step time.
        cap = batch_slots(wd, decode, wl)
        if cap < 1:
            return _unstable({"prefill": 0, "decode": 0}, float("inf"), "one request does not fit decode KV cache")
        per_group = cap / (osl * wd.step(cap, ctx))
        n_d = decode.workers or max(1, math.ceil(wl.rate / (PREFILL_TARGET_LOAD * per_group) /
                                                 wd.parallel.attention_dp))
        assumed_d = decode.workers is None
    if cap < 1:
        return _unstable({"prefill": 0, "decode": 0}, float("inf"), "one request does not fit the decode KV cache")
    d_groups = n_d * wd.parallel.attention_dp
    chunk = prefill.max_num_tokens
    per_prefill_group = _prefill_rate(wp, isl_eff, isl, chunk)
    transfer = _kv_transfer(wp, isl, link_bytes_s) + f.transfer_ms * 1e-3
    req = wp.request_s()
    if wl.concurrency is not None:
        c = wl.concurrency
        b = min(c / d_groups, cap)
        tpot = wd.token_time(b, ctx)
        x_decode = d_groups * b / ((osl - 1) * tpot)
        n_p = prefill.workers or max(1, math.ceil(x_decode / (PREFILL_TARGET_LOAD * per_prefill_group)
                                                  / wp.parallel.attention_dp))
        p_groups = n_p * wp.parallel.attention_dp
        service, cs, service_q = prefill_spread(wp, wl)
        top = p_groups * per_prefill_group
        held = c / d_groups <= cap
        first, mean, last = _burst_ttft(wp, c / p_groups if held else b * d_groups / p_groups, isl_eff, isl, chunk,
                                        wp.factors.queue)
        if wl.dephased:
            # Lengths that vary dephase the clients: in the steady state a prompt reaches a prefill group as the
            # others' answers end, at the loop's throughput x, and is prefilled on its own (`service`) after a
            # wait that grows with the groups' load (Kingman's, no longer than every other client's prompt ahead
            # of it), then handed off; the decode batch is what that throughput keeps, up to its slots.
            ahead = max(c / p_groups - 1.0, 0.0) / per_prefill_group
            alone = req + service + transfer
            ttft_mean = alone
            for _ in range(2):
                # The decode batch that TTFT leaves, and the TTFT the throughput it leaves makes, found by
                # bisection (the wait falls as the TTFT rises).
                b, tpot = _decoding(wd, c, d_groups, osl, ctx, ttft_mean, b, tpot, cap)
                decoding = (osl - 1) * tpot
                lo, hi = alone, alone + ahead
                for _ in range(PD_BISECTIONS):
                    mid = (lo + hi) / 2
                    rho = min(c / (mid + decoding) / top, 0.999)
                    if alone + min(_kingman_wait(rho, service, 1.0, cs), ahead) > mid:
                        lo = mid
                    else:
                        hi = mid
                ttft_mean = hi
            # The decode batch of the TTFT found last, so that the batch and the throughput agree.
            b, tpot = _decoding(wd, c, d_groups, osl, ctx, ttft_mean, b, tpot, cap)
            x = c / (ttft_mean + (osl - 1) * tpot)
            most = min(top, d_groups * cap / ((osl - 1) * wd.token_time(cap, ctx)))
            if x > most:
                # No more than the prefill groups or the decode slots take: the clients over wait, and the decode
                # batch is what that throughput keeps.
                x = most
                b, tpot = _decoding(wd, c, d_groups, osl, ctx, c / x - (osl - 1) * tpot, b, tpot, cap)
                ttft_mean = c / x - (osl - 1) * tpot
            rho = min(x / top, 0.999)
            wait = min(_kingman_wait(rho, service, 1.0, cs), ahead)
            # Benchmarks start every client at once: that first wave's prompts queue at the prefill groups
            # together.
            ttft = _wave_mixture(ttft_mean, wp.factors.queue, req + first + transfer, req + last + transfer)
        else:
            # Clients whose lengths all match stay in step: every round's prompts reach the prefill groups
            # together, a burst of c / groups (the measured loops of the calibration set, lengths within 6%).
            ttft_mean = req + mean + transfer
            if held:
                b, tpot = _decoding(wd, c, d_groups, osl, ctx, ttft_mean, b, tpot)
                x = c / (ttft_mean + (osl - 1) * tpot)
            else:
                x = min(x_decode, top)
                ttft_mean = max(ttft_mean, c / x - (osl - 1) * tpot)
            ttft = _spread(ttft_mean, req + first + transfer, max(req + last + transfer, 2 * ttft_mean - req - first))
            rho = wait = ahead = 0.0
        ttft = _own_lengths(ttft, service, service_q, wait, rho, ahead)
        tp = _flat(tpot)
        e2e_d = _e2e(ttft, tp, osl, wl.osl_cv)
        if assumed_d or prefill.workers is None:
            notes.append(_sized_note(prefill.workers is None, n_p, assumed_d, n_d, "assumed"))
        return Prediction(ttft, tp, tp, e2e_d, x, x * osl, b, b / cap, True, {"prefill": n_p, "decode": n_d}, notes)
    lam = wl.rate
    n_p = prefill.workers or max(1, math.ceil(lam / (PREFILL_TARGET_LOAD * per_prefill_group)
                                              / wp.parallel.attention_dp))
    p_groups = n_p * wp.parallel.attention_dp
    rho_pf = lam / p_groups / per_prefill_group
    b = least_fixed_point(lambda n: lam / d_groups * osl * wd.token_time(n, ctx), cap)
    if rho_pf >= 1 or b > cap:
        return _unstable({"prefill": n_p, "decode": n_d}, max(rho_pf, b / cap),
                         "arrival rate exceeds what the workers sustain")
    tpot_mean = wd.token_time(b, ctx)
    # A prefilled request waits at the decode worker when its batch is full: the wait comes between its first
    # token and its second, so it spreads over its TPOT.
    slot = _slot_wait(lam / d_groups, cap, (osl - 1) * tpot_mean, wl.osl_cv)
    if not math.isfinite(slot.mean):
        return _unstable({"prefill": n_p, "decode": n_d}, b / cap, "arrival rate exceeds what the decode batch "
                         "slots sustain")
    service, cs, service_q = prefill_spread(wp, wl)
    wait = _kingman_wait(rho_pf, service, wl.arrival_cv, cs)
    ttft = _queue_percentiles(service, wait, rho_pf, req + transfer, service_q, cs)
    gaps = max(lognormal_q(osl, wl.osl_cv, 0.0) - 1, 1.0)
    batch_sd = _batch_sd(lam / d_groups, b, wd.token_time(b + 1, ctx) - tpot_mean, osl)
    if not math.isfinite(batch_sd):
        return _unstable({"prefill": n_p, "decode": n_d}, b / cap, "arrival rate is past the point where the "
                         "decode batch keeps growing")
    # A percentile's token time is the step at that percentile of the batch, not a straight line through the
    # mean: decode steps of MoE models grow ever more slowly with the batch (experts already loaded), and a
    # line's slope taken at a larger mean batch would shrink the tail as the load grows.
    itl = {"mean": tpot_mean, **{p: wd.token_time(b + max(z_of(p), 0.0) * batch_sd, ctx)
                                 for p in PERCENTILES}}
    tpot = {"mean": tpot_mean + slot.mean / max(osl - 1, 1.0),
            **{p: itl[p] + slot.quantile(float(p[1:]) / 100) / gaps for p in PERCENTILES}}
    e2e = _e2e(ttft, itl, osl, wl.osl_cv, slot)
    if prefill.workers is None or decode.workers is None:
        notes.append(_sized_note(prefill.workers is None, n_p, decode.workers is None, n_d, "sized for the rate"))
    return Prediction(ttft, tpot, itl, e2e, lam, lam * osl, b, max(rho_pf, b / cap), True,
                      {"prefill": n_p, "decode": n_d}, notes)
