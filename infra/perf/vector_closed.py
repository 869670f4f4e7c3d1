"""Closed-loop predictions of many aggregated deployments at once: `serving.closed_loop_agg`, vectorised with numpy.

    predict_closed_agg([(worker, role, workload), ...]) == [closed_loop_agg(worker, role, workload), ...]

A calibration fit replays every measured closed loop at every evaluation of its factors, and an estimate at a
client count is one; here each case is one element of `infra.perf.vector`'s arrays, on its engine step, its mixed
step and its lockstep regula falsi, under the same rules (each solver visits exactly the points its scalar run
visits; every float operation in the scalar code's order). The closed loop's three nested solves run as nested
lockstep solves: Little's law over the loop for the decoding count, inside it the throughput that keeps a count
decoding, inside that the step a decoding client sees while prompts arrive at that throughput.

Cases whose clients outnumber the batch slots at the throughput the loop settles at (the slot-bound regime, a
search over the throughput of its own) are handed to `serving.closed_loop_agg` itself, one by one: few measured
loads run there, and its results are the scalar ones by construction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from infra.perf import serving
from infra.perf.arch import Worker
from infra.perf.heap import collector_paused
from infra.perf.serving import PERCENTILES, Prediction
from infra.perf.shape import Role, Workload
from infra.perf.vector import (
    _KEYS,
    _Q,
    _TAIL,
    _Cases,
    _chunk_cost,
    _chunk_steps,
    _dicts,
    _e2e,
    _kingman_wait,
    _mixed_step,
    _pack,
    _part,
    _prediction,
    _Pricer,
    _py,
    _regula_falsi,
    _service_spread,
    _square,
    _step,
    _step_percentiles,
)

_NO_FIT = "one request does not fit the KV cache"
"""`closed_loop_agg`'s unstable result, word for word."""


def _tpot(c: _Cases, x: np.ndarray, b: np.ndarray, cost: tuple[np.ndarray, ...] | None = None) -> np.ndarray:
    """`closed_loop_agg`'s TPOT at throughput x per group with b sequences decoding: the step a decoding client
    sees (its own token at least; the steps carrying a prompt hold the other clients' decodes only). `cost`: the
    mixed step's `_chunk_cost` at that batch, where the caller has it."""
    view = c.take(None)
    view.lam = x
    return _mixed_step(view, np.maximum(b, 1.0), c.others, cost) / c.accept


def _own(c: _Cases, b: np.ndarray) -> np.ndarray:
    """Seconds of a prompt's own steps (its chunks, each beside b decoding sequences)."""
    return _Pricer(c, b, c.ctx, c.half_isl)(c.per) * c.chunks


def _ttft(c: _Cases, x: np.ndarray, b: np.ndarray, base: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(steady-state TTFT, seconds of a prompt's own steps) at throughput x per group with b sequences decoding;
    `base` the decode step at b, where the caller has it."""
    rho = np.minimum(x * c.occupy, 0.999)
    if base is None:
        base = _Pricer(c, b, c.ctx, c.half_isl)()
    own = _own(c, b)
    queue = np.minimum(rho * c.others / (1 - rho) * c.occupy / 2, c.most_ahead)
    return c.request_s + own + queue + base / 2 + c.hold_steps * base * c.busy, own


def _over(c: _Cases, x: np.ndarray) -> np.ndarray:
    """`sustained`'s `over`: how far throughput x takes the decoding count past `c.count`."""
    tpot = _tpot(c, x, c.count, (c.count_room, c.count_base, c.count_extra))
    return np.where(np.isfinite(tpot), x * c.steps * tpot - c.count, np.inf)


def _sustained(c: _Cases, b: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """`closed_loop_agg`'s `sustained`: the throughput per group that keeps b sequences decoding, from the
    quadratic's root (exact while fewer than one chunk arrives per step), else by regula falsi below the rate of
    steps that carry no prompts; and the decode step at b where it priced every element's (None where not)."""
    out = np.zeros(c.n)
    some = b > 0
    if not some.any():
        return out, None
    s, at = _part(c, some)
    s.count = b = b[at]
    room, base, extra = _chunk_cost(s, b)
    # What every TPOT of the search prices at the count (its decoding client's mixed step, at one sequence at
    # least), whatever the throughput: once for the search.
    s.count_room, s.count_base, s.count_extra = room, base, extra
    less = np.flatnonzero(b < 1)
    if less.size:
        s.count_room, s.count_base, s.count_extra = (a.copy() for a in (room, base, extra))
        for a, v in zip((s.count_room, s.count_base, s.count_extra), _chunk_cost(s.take(less), 1.0)):
            a[less] = v
    k = np.maximum(1.0, s.isl_eff / room)
    x_hi = b * s.accept / (s.steps * base)
    need = b * s.accept
    a = s.steps * base / k
    quad, lin = a * (1 - s.others) * (extra + base), a + need * (extra + base * (1 - s.others))
    guess = 2 * need / (lin + np.sqrt(np.maximum(lin * lin - 4 * quad * need, 0.0))) / k
    x = guess.copy()
    rest = ~(np.abs(_over(s, guess)) <= 1e-12 * b)
    if rest.any():
        i = np.flatnonzero(rest)
        r = s.take(i)
        o_hi = _over(r, x_hi[i])
        x[i] = x_hi[i]
        j = o_hi > 0
        if j.any():
            rj = r.take(np.flatnonzero(j))
            ij = i[j]
            x[ij] = _regula_falsi(_over, rj, np.zeros(ij.size), -b[ij], x_hi[ij], o_hi[j], 1e-12, start=guess[ij],
                                  tol=1e-12 * b[ij])[0]
    out[at] = np.where(some[at], x, 0.0)
    return out, base if at is ... else None


def _loop_gap(c: _Cases, b: np.ndarray) -> np.ndarray:
    """Little's law over the loop at b decoding: b + x TTFT less the clients of a group."""
    x, base = _sustained(c, b)
    return b + x * _ttft(c, x, b, base)[0] - c.clients_per_group


def _slotted_count(c: _Cases, x: np.ndarray) -> np.ndarray:
    """`closed_loop_agg`'s `slotted`'s decoding count at throughput x per group when every batch slot holds a
    prefill or a decode (the decodes what the prefills leave): three rounds from the slots. (The scalar rounds
    price each count's TPOT and TTFT too; only the prompt's own seconds move the count.)"""
    n = c.cap
    for _ in range(3):
        n = np.maximum(c.cap - x * _own(c, n), 0.0)
    return n


def _slotted(c: _Cases, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`closed_loop_agg`'s `slotted`: (TPOT, TTFT, decoding count, a prompt's own seconds) at throughput x."""
    n = _slotted_count(c, x)
    ttft, own = _ttft(c, x, n)
    return _tpot(c, x, n), ttft, n, own


def _slots_gap(c: _Cases, x: np.ndarray) -> np.ndarray:
    n = _slotted_count(c, x)
    return x * (_own(c, n) + c.steps * _tpot(c, x, n)) - c.cap


def _root_below(c: _Cases, hi: np.ndarray) -> np.ndarray:
    """`serving.root_below` of `_slots_gap` for every element: Anderson-Bjorck regula falsi over (0, hi] to
    1e-10."""
    lo = np.zeros(c.n)
    lo, hi = _regula_falsi(_slots_gap, c, lo, _slots_gap(c, lo), hi, _slots_gap(c, hi), 1e-10, closing=True)
    return np.where(lo > 0, lo, hi)


def _wave_mixture(steady: np.ndarray, share: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """`serving._wave_mixture`: the rows mean, p50 .. p99.9."""
    span = np.maximum(hi - lo, 0.0)
    slow = (lo + hi) / 2 <= steady
    s = np.minimum(np.maximum(steady, lo), hi)
    above = np.where(span > 0, (s * (s - lo) + (hi * hi - s * s) / 2) / span, s)
    mean = np.where(slow, (1 - share) * steady + share * np.maximum(above, steady),
                    (1 - share) * steady + share * (lo + hi) / 2)
    past = np.where(span > 0, np.minimum(np.maximum((steady - lo) / span, 0.0), 1.0), (lo < steady).astype(float))
    below = np.where(slow, 0.0, share * past)
    rows = [mean]
    for q in _Q:
        at_steady = (share <= 0) | ((below < q) & (q <= below + (1 - share)))
        wave_q = np.where(q <= below, q, q - (1 - share)) / share
        point = lo + wave_q * span
        rows.append(np.where(at_steady, steady, np.where(below != 0, point, np.maximum(point, steady))))
    return np.array(rows)


def _closed_loop(c: _Cases) -> dict[str, np.ndarray]:
    """`serving.closed_loop_agg`'s figures over cases that all fit one request."""
    groups = c.workers * c.k.dp
    c.clients_per_group = cc = c.clients / groups
    c.occupy = (_step(c, 0.0, 0.0, c.per, c.half_isl) - c.k.fixed) * c.chunks
    c.steps = np.maximum(c.osl1, 1e-9)
    slotted = np.minimum(cc, c.cap)
    c.others = np.maximum(slotted - 1.0, 0.0) / slotted
    c.most_ahead = np.maximum(slotted - 1.0, 0.0) * c.occupy
    c.busy = np.minimum(np.maximum(cc - 1, 0.0), 1.0)
    held = np.where(c.isl_eff > 0, c.chunk * c.steps / (c.accept * c.isl_eff + c.steps), np.inf)
    b = np.minimum(np.minimum(cc, c.cap), held)
    g_b = _loop_gap(c, b)
    saturated = (b == held) & (g_b < 0)
    grow = g_b > 0
    if grow.any():
        i = np.flatnonzero(grow)
        b = b.copy()
        b[i] = _regula_falsi(_loop_gap, c.take(i), np.zeros(i.size), -cc[i], b[i], g_b[i], 1e-10, closing=True)[0]
    x, base = _sustained(c, b)
    tpot = _tpot(c, x, b)
    ttft, own = _ttft(c, x, b, base)
    wait = (cc - b) / x
    ttft = np.where(saturated & (wait > ttft), wait, ttft)
    slots = (cc > c.cap) & (x * (own + c.steps * tpot) > c.cap)
    if slots.any():
        # The batch slots hold fewer sequences than there are clients: the throughput that keeps every slot in a
        # prefill or a decode, the other clients queueing for one.
        i = np.flatnonzero(slots)
        s = c.take(i)
        x_s = _root_below(s, np.where(s.occupy > 0, 1.0 / s.occupy, 1e9))
        tpot_s, ttft_s, b_s, _ = _slotted(s, x_s)
        wait = s.clients_per_group / x_s - s.steps * tpot_s
        x[i], tpot[i], b[i], saturated[i] = x_s, tpot_s, b_s, False
        ttft[i] = np.where(wait > ttft_s, wait, ttft_s)
    n = np.minimum(cc, c.cap)
    total = n * c.isl_eff
    alone, t_chunk = _step(c, 0.0, 0.0, np.stack([total, c.chunk]), c.half_isl)
    small = total <= c.chunk
    first = np.where(small, alone, t_chunk * c.chunks)
    last = np.where(small, alone, t_chunk * (total / c.chunk))
    ttft = _wave_mixture(ttft, c.queue, c.request_s + first, c.request_s + last)
    service, cs, service_q = _own_spread(c, b)
    rho = np.minimum(x * c.occupy, 0.999)
    busy = rho * c.others
    wait = np.minimum(rho * c.others / (1 - rho) * c.occupy / 2, c.most_ahead) * (1 + cs * cs)
    ttft = _own_lengths(ttft, service, service_q, wait, busy, np.full(busy.size, np.inf))
    itl, tpot_q = _closed_steps(c, np.maximum(b, 1.0), x * c.others, busy, tpot)
    return {"ttft": ttft, "tpot": tpot_q, "itl": itl, "e2e": _e2e(ttft, tpot_q, c.osl, c.osl_cv),
            "throughput": x * groups, "output": x * groups * c.osl, "batch": b,
            "load": np.where(saturated, 1.0, b / c.cap), "saturated": saturated}


def _own_spread(c: _Cases, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`serving.closed_loop_agg`'s prompt's own prefill beside b decoding sequences: (at the mean prompt, CV and
    rows p50 .. p99.9 over the prompt lengths, `_service_spread`'s). Fixed prompts are left at 0 (their spread,
    the differences `_own_lengths` takes, is an exact 0): the calibration's rows, which a fit replays at every
    step, have fixed lengths."""
    service, cs, service_q = np.zeros(c.n), np.zeros(c.n), np.zeros((len(_Q), c.n))
    varied = c.isl_cv > 0
    if varied.any():
        s, at = _part(c, varied)
        keep, b_s = 1 - s.prefix_hit, b[at]

        def price(n: np.ndarray) -> np.ndarray:
            return _step(s, b_s, s.ctx, np.minimum(n * keep, s.chunk), n / 2) * np.maximum(1.0, n * keep / s.chunk)

        _, cs[at], service_q[:, at] = _service_spread(s, price)
        service[at] = price(s.isl[None, :])[0]
        service, cs = np.where(varied, service, 0.0), np.where(varied, cs, 0.0)
        service_q = np.where(varied, service_q, 0.0)
    return service, cs, service_q


def _own_lengths(ttft: np.ndarray, service: np.ndarray, service_q: np.ndarray, wait: np.ndarray, busy: np.ndarray,
                 most: np.ndarray) -> np.ndarray:
    """`serving._own_lengths`: the rows mean, p50 .. p99.9."""
    out = np.empty_like(ttft)
    out[0] = mean = ttft[0]
    for k, (q, tail) in enumerate(zip(_Q, _TAIL)):
        own = service_q[k] - service
        if q <= 0.5:
            out[k + 1] = ttft[k + 1] + own
            continue
        waits = busy > tail
        queued = np.zeros(busy.size)
        queued[waits] = np.minimum((wait[waits] / busy[waits]) * _py(math.log, busy[waits] / tail), most[waits])
        out[k + 1] = mean + np.sqrt(_square(np.maximum(ttft[k + 1] - mean, 0.0)) + _square(np.maximum(own, 0.0))
                                    + _square(np.maximum(queued - wait, 0.0)))
    return out


def _closed_steps(c: _Cases, b: np.ndarray, lam: np.ndarray, busy: np.ndarray, tpot: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """`serving._closed_steps`: (ITL, TPOT), each the rows mean, p50 .. p99.9."""
    flat = np.broadcast_to(tpot, (len(_KEYS), tpot.size))
    some = lam > 0
    if not some.any():
        return flat, flat
    s, at = _part(c, some)
    s = s.take(None)
    s.lam = lam[at]
    b_s = b[at]
    lone = _step(s, b_s, s.ctx)
    durations, rates = _chunk_steps(s, b_s, busy[at])
    zero = np.zeros((len(_Q), s.n))
    dephased = np.where((s.isl_cv > 0) | (s.osl_cv > 0), 1.0, 0.0)
    itl_s, tpot_s = _step_percentiles(s, tpot[at], lone, durations, rates, zero, zero, lone, dephased, closed=True)
    most = _step(s, b_s, s.ctx, np.maximum(s.chunk - b_s, 1.0), s.isl / 2) / s.accept
    most = np.where(most > tpot[at], most, tpot[at])
    tpot_s = np.where(tpot_s < most, tpot_s, most)
    itl, tpot_q = flat.copy(), flat.copy()
    itl[:, at] = np.where(some[at], itl_s, flat[:, at])
    tpot_q[:, at] = np.where(some[at], tpot_s, flat[:, at])
    return itl, tpot_q


def _spread(mean: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """`serving._spread`: the rows mean, p50 .. p99.9."""
    rows = [mean]
    for q in _Q:
        point = first + q * (last - first)
        if q <= 0.5:
            point = np.where(first == last, mean, point)
        rows.append(np.maximum(point, 0.0))
    rows[1] = np.maximum(rows[1], np.minimum(mean, last))
    for k in range(2, len(rows)):
        rows[k] = np.maximum(rows[k], rows[k - 1])
    return np.array(rows)


def _little(cd: _Cases, live: np.ndarray, b: np.ndarray, tpot: np.ndarray, clients: np.ndarray, steps: np.ndarray,
            ttft: np.ndarray, d_groups: np.ndarray, cap: np.ndarray | None = None) -> None:
    """`serving._decoding`: the decode batch by Little's law with the TTFT `ttft` (no more than `cap`, where
    given), in place on `b` and `tpot`: twelve steps at most, each element of `live` stopping at its own test."""
    live = live.copy()
    for _ in range(12):
        i = np.flatnonzero(live)
        if not i.size:
            break
        b_i, tpot_i = b[i], tpot[i]
        b_new = clients[i] * steps[i] * tpot_i / (ttft[i] + steps[i] * tpot_i) / d_groups[i]
        if cap is not None:
            b_new = np.minimum(b_new, cap[i])
        done = np.abs(b_new - b_i) < 1e-3 * b_i
        b[i] = b_new
        tpot[i] = _step(cd.take(i), b_new, cd.ctx[i]) / cd.accept[i]
        live[i] = ~done


def _closed_disagg(cp: _Cases, cd: _Cases, link: np.ndarray, devices: np.ndarray, transfer_ms: np.ndarray,
                   prefill_workers: np.ndarray, decode_workers: np.ndarray, service: np.ndarray
                   ) -> dict[str, np.ndarray]:
    """`serving.disagg`'s closed loop over cases whose decode KV cache holds a request: `cp` the prefill workers
    (with the cases' workloads and prefill roles), `cd` the decode workers (decode roles); a role's workers 0
    where the model sizes them; `service` a prompt's prefill over the prompt lengths (`serving.prefill_spread`'s
    mean, CV and percentiles, rows mean, CV, p50 .. p99.9)."""
    clients, osl, isl = cd.clients, cd.osl, cd.isl
    # `_size_decode`
    cap = cd.cap
    dp_d, dp_p = cd.k.dp, cp.k.dp
    sized_d = decode_workers == 0
    n_d = np.where(sized_d, np.maximum(1.0, np.ceil(np.ceil(clients / np.maximum(cap, 1.0)) / dp_d)), decode_workers)
    d_groups = n_d * dp_d
    # `_prefill_rate` (a prompt computes one token at least)
    isl_eff, chunk = cp.isl_eff, cp.chunk
    least = np.maximum(isl_eff, 1.0)
    fits = least <= chunk
    k = np.maximum(1.0, np.floor_divide(chunk, least))
    one, whole = _step(cp, 0.0, 0.0, np.stack([np.where(fits, k * least, chunk), chunk]), cp.half_isl)
    per_prefill = np.where(fits, k / one, 1.0 / (whole * least / chunk))
    kv = cp.kv_full * isl + cp.kv_swa_token * np.minimum(isl, cp.k.window) + cp.state_bytes
    transfer = kv * devices / np.maximum(link, 1.0) + transfer_ms * 1e-3
    req = cp.request_s
    steps = osl - 1
    per_group = clients / d_groups
    b = np.minimum(per_group, cap)
    tpot = _step(cd, b, cd.ctx) / cd.accept
    x_decode = d_groups * b / (steps * tpot)
    sized_p = prefill_workers == 0
    n_p = np.where(sized_p, np.maximum(1.0, np.ceil(x_decode / (serving.PREFILL_TARGET_LOAD * per_prefill) / dp_p)),
                   prefill_workers)
    p_groups = n_p * dp_p
    # `_burst_ttft` with the prefill worker's first wave
    held = per_group <= cap
    n = np.where(held, clients / p_groups, b * d_groups / p_groups)
    total = n * isl_eff
    small = total <= chunk
    alone, t_chunk = _step(cp, 0.0, 0.0, np.stack([total, chunk]), cp.half_isl)
    first = np.where(small, alone, t_chunk * np.maximum(1.0, isl_eff / chunk))
    last = np.where(small, alone, t_chunk * (total / chunk))
    mean = np.where(small, alone, first + cp.queue * (last - first))
    own, cs, own_q = service[0], service[1], service[2:]
    top = p_groups * per_prefill
    steady = (cp.isl_cv > 0) | (cd.osl_cv > 0)
    b0, tpot0 = b.copy(), tpot.copy()
    # Clients in step (`serving.disagg`): every round's prompts a burst at the prefill groups.
    ttft_mean = req + mean + transfer
    _little(cd, held, b, tpot, clients, steps, ttft_mean, d_groups)
    e2e = np.where(held, ttft_mean + steps * tpot, 0.0)
    x = np.where(held, clients / e2e, np.minimum(x_decode, top))
    e2e = np.where(held, e2e, clients / x)
    behind = e2e - steps * tpot
    ttft_mean = np.where(~held & (behind > ttft_mean), behind, ttft_mean)
    early, late = req + first + transfer, req + last + transfer
    ttft = _spread(ttft_mean, early, np.where(2 * ttft_mean - req - first > late, 2 * ttft_mean - req - first, late))
    rho = wait = ahead = np.zeros(clients.size)
    if steady.any():
        # Dephased clients: a prompt prefilled on its own after Kingman's wait at the loop's throughput, found by
        # bisection between a prompt alone and one behind every other client's, twice over with the decode batch
        # that TTFT leaves.
        i = np.flatnonzero(steady)
        s_cd = cd.take(i)
        c_i, steps_i, d_i, top_i, own_i, cs_i = clients[i], steps[i], d_groups[i], top[i], own[i], cs[i]
        cap_i = cap[i]
        ahead_i = np.maximum(c_i / p_groups[i] - 1.0, 0.0) / per_prefill[i]
        lone = req[i] + own_i + transfer[i]
        b_i, tpot_i = b0[i], tpot0[i]
        mean_i = lone.copy()
        for _ in range(2):
            _little(s_cd, np.ones(i.size, bool), b_i, tpot_i, c_i, steps_i, mean_i, d_i, cap_i)
            decoding = steps_i * tpot_i
            lo, hi = lone, lone + ahead_i
            for _ in range(serving.PD_BISECTIONS):
                mid = (lo + hi) / 2
                r = np.minimum(c_i / (mid + decoding) / top_i, 0.999)
                above = lone + np.minimum(_kingman_wait(r, own_i, 1.0, cs_i), ahead_i) > mid
                lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
            mean_i = hi
        _little(s_cd, np.ones(i.size, bool), b_i, tpot_i, c_i, steps_i, mean_i, d_i, cap_i)
        x_i = c_i / (mean_i + steps_i * tpot_i)
        most = d_i * cap_i / (steps_i * (_step(s_cd, cap_i, s_cd.ctx) / s_cd.accept))
        most = np.where(most < top_i, most, top_i)
        over = x_i > most
        x_i = np.where(over, most, x_i)
        if over.any():
            _little(s_cd, over, b_i, tpot_i, c_i, steps_i, c_i / x_i - steps_i * tpot_i, d_i, cap_i)
        mean_i = np.where(over, c_i / x_i - steps_i * tpot_i, mean_i)
        rho_i = np.minimum(x_i / top_i, 0.999)
        b[i], tpot[i], x[i] = b_i, tpot_i, x_i
        rho, wait, ahead = rho.copy(), wait.copy(), ahead.copy()
        rho[i], ahead[i] = rho_i, ahead_i
        wait[i] = np.minimum(_kingman_wait(rho_i, own_i, 1.0, cs_i), ahead_i)
        ttft[:, i] = _wave_mixture(mean_i, cp.queue[i], early[i], req[i] + last[i] + transfer[i])
    ttft = _own_lengths(ttft, own, own_q, wait, rho, ahead)
    flat = np.broadcast_to(tpot, (len(_KEYS), tpot.size))
    return {"ttft": ttft, "tpot": tpot, "e2e": _e2e(ttft, flat, osl, cd.osl_cv), "throughput": x, "output": x * osl,
            "batch": b, "load": b / cap, "prefill": n_p, "decode": n_d, "sized_p": sized_p, "sized_d": sized_d}


def predict_closed_agg(cases: Sequence[tuple[Worker, Role, Workload]], *, exact: bool = False) -> list[Prediction]:
    """`[serving.closed_loop_agg(w, role, wl) for w, role, wl in cases]`, computed for all the cases at once: the
    same predictions field for field (to the last bit with `exact`, see `infra.perf.vector.predict_open_agg`).
    Cases may mix workers, roles and workloads; every workload needs its clients (`concurrency`)."""
    if not cases:
        return []
    with collector_paused(), np.errstate(all="ignore"):
        c = _pack(cases, exact, closed=True)
        fits = c.cap >= 1
        some = np.flatnonzero(fits)
        figures = _closed_loop(c.take(some)) if some.size else None
        return _predictions(cases, fits, some, figures)


def _predictions(cases: Sequence[tuple[Worker, Role, Workload]], fits: np.ndarray, some: np.ndarray,
                 figures: dict[str, np.ndarray] | None) -> list[Prediction]:
    preds: list[Prediction | None] = [None] * len(cases)
    for i in np.flatnonzero(~fits).tolist():
        preds[i] = serving._unstable({"agg": cases[i][1].workers or 1}, float("inf"), _NO_FIT)
    if figures is None:
        return preds  # type: ignore[return-value]
    ttft, tpot, itl, e2e = (_dicts(figures[m]) for m in ("ttft", "tpot", "itl", "e2e"))
    columns = [figures[k].tolist() for k in ("throughput", "output", "batch", "load", "saturated")]
    for i, t, tp, it, e, x, out, b, load, saturated in zip(some.tolist(), ttft, tpot, itl, e2e, *columns):
        role = cases[i][1]
        preds[i] = _prediction(t, tp, it, e, x, out, b, load, True, {"agg": role.workers or 1},
                               [serving.budget_full(role.max_num_tokens)] if saturated else [])
    return preds  # type: ignore[return-value]


def _prefill_spread(wp: Worker, wl: Workload) -> tuple[float, ...]:
    """`serving.prefill_spread`'s mean, CV and percentiles (p50 .. p99.9)."""
    mean, cv, quantiles = serving.prefill_spread(wp, wl)
    return (mean, cv, *(quantiles[p] for p in PERCENTILES))


def predict_closed_disagg(cases: Sequence[tuple[Worker, Worker, Role, Role, Workload, float]], *,
                          exact: bool = False) -> list[Prediction]:
    """`[serving.disagg(wp, wd, prefill, decode, wl, link) for ...]` for closed-loop workloads, all at once: the
    same predictions field for field (to the last bit with `exact`)."""
    if not cases:
        return []
    with collector_paused(), np.errstate(all="ignore"):
        cd = _pack([(wd, decode, wl) for _, wd, _, decode, wl, _ in cases], exact, closed=True)
        fits = cd.cap >= 1
        some = np.flatnonzero(fits)
        preds: list[Prediction | None] = [None] * len(cases)
        for i in np.flatnonzero(~fits).tolist():
            preds[i] = serving._unstable({"prefill": 0, "decode": 0}, float("inf"),
                                         "one request does not fit the decode KV cache")
        if not some.size:
            return preds  # type: ignore[return-value]
        picked = [cases[i] for i in some.tolist()]
        cp = _pack([(wp, prefill, wl) for wp, _, prefill, _, wl, _ in picked], exact, closed=True)
        per_case = np.array([(link, wp.parallel.devices, wd.factors.transfer_ms, prefill.workers or 0,
                              decode.workers or 0) for wp, wd, prefill, decode, _, link in picked], float).T
        service = np.array([_prefill_spread(wp, wl) for wp, _, _, _, wl, _ in picked], float).T
        got = _closed_disagg(cp, cd.take(some), *per_case, service)
        ttft, e2e = _dicts(got["ttft"]), _dicts(got["e2e"])
        columns = [got[k].tolist() for k in ("tpot", "throughput", "output", "batch", "load", "prefill", "decode",
                                             "sized_p", "sized_d")]
        for i, t, e, (tpot, x, out, b, load, n_p, n_d, sized_p, sized_d) in zip(some.tolist(), ttft, e2e,
                                                                                 zip(*columns)):
            n_p, n_d = int(n_p), int(n_d)
            notes = [serving._sized_note(sized_p, n_p, sized_d, n_d, "assumed")] if sized_p or sized_d else []
            tp = dict.fromkeys(_KEYS, tpot)
            preds[i] = _prediction(t, tp, tp, e, x, out, b, load, True, {"prefill": n_p, "decode": n_d}, notes)
        return preds  # type: ignore[return-value]


__all__ = ["PERCENTILES", "predict_closed_agg", "predict_closed_disagg"]
