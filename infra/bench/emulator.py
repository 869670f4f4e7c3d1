"""An OpenAI-compatible endpoint that serves emulated tokens over real HTTP, for end-to-end tests of clients and
of the benchmark harness itself.

Routes: `/v1/models`, `/v1/chat/completions` and `/v1/completions` (streamed and not, with `usage` and
`finish_reason`), `/health`, and `/metrics` in the Prometheus text format under vLLM's names
(`vllm:time_to_first_token_seconds`, `vllm:inter_token_latency_seconds`, `vllm:e2e_request_latency_seconds`,
`vllm:request_success_total`, ...), so that one scraper reads the emulator and a real engine alike; or, with
`metrics_family="dynamo"`, under an NVIDIA Dynamo frontend's (`dynamo_frontend_time_to_first_token_seconds`, ...,
labelled by the served model).

Token timing comes from a `Timing` source. `FixedTiming` gives every request the same TTFT and gap between tokens
(measured from when the request arrived), which is what a timing-accuracy check needs. The answer always runs to
`max_tokens` (16 when unset), as a model that never emits end-of-sequence would; prompt tokens are counted as
whitespace-separated words, the load client's own approximation. `EngineTiming` finds the prompts' shared
prefixes in those words as a prefix cache would (`PrefixIndex`), and its engines cache them; `/metrics` counts the
prompt tokens looked up and found (`vllm:prefix_cache_queries`, `vllm:prefix_cache_hits`).

Faults, each drawn per request from a seeded generator: `error_rate` answers HTTP 500; `stall_rate` pauses the
stream once for `stall_ms` at a random token; `disconnect_rate` ends the stream at a random token with no
finish_reason and no `[DONE]`; `slow_start_s` answers 503 everywhere (and `/health` 503) for that long after start.
`check_options` refuses settings outside their bounds (`LIMITS`) before anything is served.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import uvicorn
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from infra.bench.engine import BLOCK_SIZE, SimRequest
from infra.bench.simulate import front_router
from infra.errors import IntentError, Location, Problem

TOKEN_WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do")
DEFAULT_MAX_TOKENS = 16
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                   10.0, 20.0, 40.0, 80.0)

TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)
"""vLLM's buckets of request token counts (1-2-5 steps up to its longest context)."""


CATCH_UP_S = 0.05
"""How far behind real time an engine's next step may start, to make up for the event loop waking it late."""
MAX_MS = 3_600_000.0
"""Longest first-token delay, gap between tokens or stall: an hour, beyond any client's timeout."""
MAX_SLOW_START_S = 86_400.0
MAX_TOKENS_PER_CHUNK = 1_000_000
MAX_PORT = 65_535

LIMITS: dict[str, tuple[float, float, str]] = {
    "--port": (0, MAX_PORT, "a TCP port from 0 (any free one) to 65535"),
    "--ttft-ms": (0.0, MAX_MS, "milliseconds from 0 to 3600000"),
    "--itl-ms": (0.0, MAX_MS, "milliseconds from 0 to 3600000"),
    "--stall-ms": (0.0, MAX_MS, "milliseconds from 0 to 3600000"),
    "--slow-start": (0.0, MAX_SLOW_START_S, "seconds from 0 to 86400"),
    "--error-rate": (0.0, 1.0, "a fraction from 0 to 1"),
    "--stall-rate": (0.0, 1.0, "a fraction from 0 to 1"),
    "--disconnect-rate": (0.0, 1.0, "a fraction from 0 to 1"),
    "--tokens-per-chunk": (1, MAX_TOKENS_PER_CHUNK, "a whole number from 1 to 1000000"),
}
"""flag -> (lowest, highest, what to give)."""


def check_options(**flags: float | None) -> None:
    """Refuse an emulator setting outside its `LIMITS` (NaN and infinity included) in one line naming its flag;
    keywords are the flags' names in snake case (`ttft_ms` for --ttft-ms), None for a setting not given."""
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        low, high, what = LIMITS[flag]
        if value is None or (math.isfinite(value) and low <= value <= high):
            continue
        why = f"{value:g} is outside {low:g}..{high:g}" if math.isfinite(value) else f"{value} is not a finite number"
        raise IntentError(Problem(why, Location(path=flag), f"give {what}"))


class Timing(Protocol):
    """When the tokens of one request become available."""

    def rejects(self, prompt_tokens: int, max_tokens: int) -> str | None:
        """Why such a request can never be served (answered HTTP 400), else None."""
        ...

    def tokens(self, prompt_tokens: int, max_tokens: int, arrived: float, prompt: Sequence[str] = (),
               found: Callable[[int], None] | None = None) -> AsyncIterator[int]:
        """Yield the number of tokens that became available, each at the time they do (perf_counter clock);
        `prompt` is the prompt's words, and `found` hears how many of them the prefix cache held."""
        ...


@dataclass(frozen=True)
class FixedTiming:
    """First token `ttft_ms` after arrival, then one token every `itl_ms`, on an absolute schedule so that event
    loop delays do not accumulate."""

    ttft_ms: float
    itl_ms: float

    def rejects(self, prompt_tokens: int, max_tokens: int) -> str | None:
        return None

    async def tokens(self, prompt_tokens: int, max_tokens: int, arrived: float, prompt: Sequence[str] = (),
                     found: Callable[[int], None] | None = None) -> AsyncIterator[int]:
        for i in range(max_tokens):
            due = arrived + (self.ttft_ms + i * self.itl_ms) / 1000.0
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            yield 1


MAX_INDEXED_BLOCKS = 1 << 20
"""Prompt blocks `PrefixIndex` remembers, over every group (the least recently met groups are forgotten first)."""


class PrefixIndex:
    """Prompts as the prefix groups the engines cache by (`SimRequest.prefix_group`), read from their words as a
    prefix cache reads tokens: in whole blocks (`BLOCK_SIZE`), each block's hash chained to those before it. A
    prompt belongs to the group of its first block, and its prefix is as many leading blocks as an earlier prompt
    of the group had in common with it: what a cache holding every earlier prompt could find. The first prompt of
    a group offers all its whole blocks (it finds none cached, and the engines keep them for the group's later
    prompts); whether a prefix is still cached when it is met is the engines' business."""

    def __init__(self, block: int = BLOCK_SIZE, most: int = MAX_INDEXED_BLOCKS):
        self.block, self.most = block, most
        self.groups: OrderedDict[int, tuple[int, set[int]]] = OrderedDict()
        """First block's hash -> (group, the chained hashes of every block its prompts had)."""
        self.size = 0
        self.next_id = 0

    def find(self, words: Sequence[str]) -> tuple[int, int]:
        """(prefix group, leading tokens an earlier prompt of the group shares, or all its whole blocks' for the
        group's first); (-1, 0) under one block."""
        b = self.block
        chain, h = [], 0
        for i in range(len(words) // b):
            h = hash((h, *words[i * b:(i + 1) * b]))
            chain.append(h)
        if not chain:
            return -1, 0
        got = self.groups.get(chain[0])
        first = got is None
        if got is None:
            got = self.groups[chain[0]] = (self.next_id, set())
            self.next_id += 1
        self.groups.move_to_end(chain[0])
        group, seen = got
        shared = 0 if first else next((i for i, h in enumerate(chain) if h not in seen), len(chain))
        seen.update(chain[shared:])
        self.size += len(chain) - shared
        while self.size > self.most and len(self.groups) > 1:
            _, (_, old) = self.groups.popitem(last=False)
            self.size -= len(old)
        return group, (len(chain) if first else shared) * b


class EngineTiming:
    """Tokens as a plan's engines emit them, stepped in real time: one asyncio task per engine (`Engine` of
    `infra.bench.engine`, every attention group of every worker of every allocation) runs a step, sleeps for the
    step's duration as the performance model prices it, then hands out the tokens the step emitted. Requests go to
    engines through the simulator's router; a disaggregated request is prefilled, waits for its KV cache to cross
    the link, and then decodes, its first token reaching the client at the hand-over."""

    def __init__(self, groups: list[Any], policy: str = "least-loaded"):

        self.engines: list[Any] = []
        self.entries: list[int] = []
        self.decode: list[list[int]] = []
        self.owner: list[int] = []
        for g, grp in enumerate(groups):
            for e in grp.entry:
                self.entries.append(len(self.engines))
                self.engines.append(e)
                self.owner.append(g)
            ids = []
            for e in grp.decode:
                ids.append(len(self.engines))
                self.engines.append(e)
                self.owner.append(g)
            self.decode.append(ids)
        self.front, self.back = front_router(groups, policy)  # type: ignore[arg-type]
        self.live: dict[int, asyncio.Queue[tuple[int, bool]]] = {}
        """Request id -> its token queue (a request's `entry` is its slot in the front router, `context` its slot in
        the router that placed it last)."""
        self.wake: list[asyncio.Event] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.next_id = 0
        self.t0 = time.perf_counter()
        self.prefixes = PrefixIndex()

    def rejects(self, prompt_tokens: int, max_tokens: int) -> str | None:

        why = [self.engines[i].rejects(SimRequest(-1, prompt_tokens, max_tokens)) for i in self.entries]
        return None if any(w is None for w in why) else why[0]

    def _start(self) -> None:
        if not self.tasks:
            self.wake = [asyncio.Event() for _ in self.engines]
            self.tasks = [asyncio.create_task(self._run(i)) for i in range(len(self.engines))]

    def _add(self, i: int, req: Any) -> None:
        self.engines[i].add(req, time.perf_counter() - self.t0)
        self.wake[i].set()

    async def tokens(self, prompt_tokens: int, max_tokens: int, arrived: float, prompt: Sequence[str] = (),
                     found: Callable[[int], None] | None = None) -> AsyncIterator[int]:

        self._start()
        k = self.front.pick()
        i = self.entries[k]
        group, shared = self.prefixes.find(prompt)
        req = SimRequest(self.next_id, prompt_tokens, max_tokens, prefix_group=group,
                         prefix_tokens=min(shared, prompt_tokens), context=k, entry=k)
        self.next_id += 1
        queue: asyncio.Queue[tuple[int, bool]] = asyncio.Queue()
        self.live[req.id] = queue
        try:
            delay = arrived + self.engines[i].model.request_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            self._add(i, req)
            first = True
            while True:
                n, finished = await queue.get()
                if first and (n or finished) and found is not None:
                    found(req.cached_tokens)  # what its prefill found cached
                    first = False
                if n:
                    yield n
                if finished:
                    return
        finally:
            self.live.pop(req.id, None)

    def _handoff(self, i: int, req: Any) -> None:
        """A prefilled request's KV cache has reached the decode side: its first token is out; decode the rest."""
        queue = self.live.get(req.id)
        if queue is None or req.output_tokens <= 1:
            self.front.done(req.entry)
            if queue is not None:
                queue.put_nowait((req.generated, True))
            return
        g = self.owner[i]
        req.context = self.back[g].pick()
        queue.put_nowait((1, False))
        req.last_token = time.perf_counter() - self.t0
        self._add(self.decode[g][req.context], req)

    async def _run(self, i: int) -> None:
        e = self.engines[i]
        loop = asyncio.get_running_loop()
        ended: float | None = None
        while True:
            now = time.perf_counter() - self.t0
            # Back to back steps start where the last one ended, up to CATCH_UP_S in the past, so that the event
            # loop's late wake-ups do not add up over thousands of short decode steps.
            res = e.step(now if ended is None else max(ended, now - CATCH_UP_S))
            if res is None:
                ended = None
                self.wake[i].clear()
                await self.wake[i].wait()
                continue
            ended = res.end
            delay = self.t0 + res.end - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if e.role != "prefill":
                for rid, n, finished in res.tokens:
                    queue = self.live.get(rid)
                    if queue is not None:
                        queue.put_nowait((n, finished))
            for req in res.done:
                if e.role == "prefill":
                    # Its entry slot stays taken until it has decoded (released in _handoff or below).
                    loop.call_later(e.model.transfer_s(req.input_tokens), self._handoff, i, req)
                    continue
                if e.role == "decode":
                    self.back[self.owner[i]].done(req.context)
                self.front.done(req.entry)


@dataclass(frozen=True)
class Faults:
    """Fault injection, per request."""

    error_rate: float = 0.0
    stall_ms: float = 0.0
    stall_rate: float = 0.0
    disconnect_rate: float = 0.0
    slow_start_s: float = 0.0


@dataclass
class _Metrics:
    registry: Any
    ttft: Any
    itl: Any
    e2e: Any
    success: Any
    """Finished requests, by model and a second label: `finish_reason` (vLLM's) or `status` (`finished`)."""
    failures: Any
    running: Any
    request_prompt: Any
    request_generation: Any
    prompt_tokens: Any = None
    generation_tokens: Any = None
    request_tpot: Any = None
    cached: Any = None
    """Prompt tokens each request found cached (a histogram: Dynamo's)."""
    cache_queries: Any = None
    cache_hits: Any = None
    """Prompt tokens looked up in, and found in, the prefix cache (counters: vLLM's)."""
    finished: Callable[[str], str] = str
    """The second label of a finished request's count, from its finish reason."""


METRICS = ("vllm", "dynamo")
"""The families of series the emulator exports: a vLLM engine's, or an NVIDIA Dynamo frontend's
(`infra.catalog.metrics`)."""


def _metrics(model: str, family: str = "vllm") -> _Metrics:
    reg = CollectorRegistry()
    # The process's own series, as an engine on the client's default registry exports them (its start time tells
    # two scrapes of one process from a restart).
    ProcessCollector(registry=reg)
    failures = Counter("infra_emulator:request_failure", "Requests failed by fault injection or bad input.",
                       ["model_name", "reason"], registry=reg)
    if family == "dynamo":
        # lib/llm/src/http/service/metrics.rs: per-request histograms labelled by the served model, the gap
        # between tokens observed once per token, and requests counted by status.
        def dyn(name: str, doc: str, buckets: Any = LATENCY_BUCKETS) -> Any:
            return Histogram(f"dynamo_frontend_{name}", doc, ["model"], registry=reg, buckets=buckets).labels(model)

        return _Metrics(
            reg, dyn("time_to_first_token_seconds", "Time to first token."),
            dyn("inter_token_latency_seconds", "Gap between tokens."),
            dyn("request_duration_seconds", "Request duration."),
            Counter("dynamo_frontend_requests", "Requests.", ["model", "status"], registry=reg), failures,
            Gauge("dynamo_frontend_inflight_requests", "Requests in flight.", ["model"], registry=reg).labels(model),
            dyn("input_sequence_tokens", "Prompt tokens of a request.", TOKEN_BUCKETS),
            dyn("output_sequence_tokens", "Answer tokens of a request.", TOKEN_BUCKETS),
            cached=dyn("cached_tokens", "Prompt tokens a request found cached.", TOKEN_BUCKETS),
            finished=lambda _: "success")
    labels = ["model_name"]

    def hist(name: str, doc: str) -> Any:
        return Histogram(name, doc, labels, registry=reg, buckets=LATENCY_BUCKETS).labels(model)

    return _Metrics(
        reg,
        hist("vllm:time_to_first_token_seconds", "Request arrival to first token written."),
        hist("vllm:inter_token_latency_seconds", "Gap between successive token chunks written."),
        hist("vllm:e2e_request_latency_seconds", "Request arrival to last token written."),
        Counter("vllm:request_success", "Requests finished.", labels + ["finished_reason"], registry=reg),
        failures,
        Gauge("vllm:num_requests_running", "Requests being answered.", labels, registry=reg).labels(model),
        Histogram("vllm:request_prompt_tokens", "A finished request's prompt tokens.", labels, registry=reg,
                  buckets=TOKEN_BUCKETS).labels(model),
        Histogram("vllm:request_generation_tokens", "A finished request's generated tokens.", labels, registry=reg,
                  buckets=TOKEN_BUCKETS).labels(model),
        prompt_tokens=Counter("vllm:prompt_tokens", "Prompt tokens processed.", labels, registry=reg).labels(model),
        generation_tokens=Counter("vllm:generation_tokens", "Tokens generated.", labels, registry=reg).labels(model),
        request_tpot=hist("vllm:request_time_per_output_token_seconds", "A finished request's decode time per "
                          "output token after the first."),
        cache_queries=Counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", labels,
                              registry=reg).labels(model),
        cache_hits=Counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", labels,
                           registry=reg).labels(model),
    )


@dataclass
class Emulator:
    """The served endpoint: models, timing, faults and what it has counted."""

    models: list[str]
    timing: Timing
    faults: Faults = field(default_factory=Faults)
    seed: int = 0
    tokens_per_chunk: int = 1
    """Tokens bundled into one SSE chunk (an engine's detokenizer can do this; a chunk is not a token)."""
    usage: bool = True
    """Send usage in streams when asked (some servers never do)."""
    metrics_family: str = "vllm"
    """Whose series `/metrics` exports (`METRICS`)."""

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.started = time.perf_counter()
        self.metrics = _metrics(self.models[0], self.metrics_family)

    # -- protocol ----------------------------------------------------------------------------------------------

    def app(self) -> Any:
        """The ASGI application."""
        return Starlette(routes=[
            Route("/health", self._health), Route("/metrics", self._prometheus),
            Route("/v1/models", self._models),
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/completions", self._completions, methods=["POST"]),
        ])

    def _loading(self) -> bool:
        return time.perf_counter() - self.started < self.faults.slow_start_s

    async def _health(self, request: Any) -> Any:
        return PlainTextResponse("loading" if self._loading() else "ok", status_code=503 if self._loading() else 200)

    async def _prometheus(self, request: Any) -> Any:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def _models(self, request: Any) -> Any:
        if self._loading():
            return _error(503, "the model is loading")
        return JSONResponse({"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "infra-emulator"} for m in self.models]})

    async def _chat(self, request: Any) -> Any:
        return await self._complete(request, chat=True)

    async def _completions(self, request: Any) -> Any:
        return await self._complete(request, chat=False)

    async def _complete(self, request: Any, chat: bool) -> Any:
        arrived = time.perf_counter()
        if self._loading():
            return self._fail(503, "the model is loading", "loading")
        try:
            body = json.loads(await request.body())
        except (ValueError, RecursionError):
            return self._fail(400, "the body is not JSON (or is nested too deeply)", "bad_request")
        except ClientDisconnect:
            return self._fail(499, "the client went away", "client_disconnect")
        if not isinstance(body, dict):
            return self._fail(400, "the body is not a JSON object", "bad_request")
        model = body.get("model")
        if model not in self.models:
            return self._fail(404, f"The model `{model}` does not exist.", "bad_request")
        if self.rng.random() < self.faults.error_rate:
            return self._fail(500, "injected server error", "injected_error")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list):
                return self._fail(400, "messages must be a list", "bad_request")
            prompt = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        else:
            prompt = body.get("prompt", "")
            prompt = " ".join(prompt) if isinstance(prompt, list) else str(prompt)
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return self._fail(400, "max_tokens must be a positive integer", "bad_request")
        words = prompt.split()
        why = self.timing.rejects(len(words), max_tokens)
        if why is not None:
            return self._fail(400, why, "bad_request")
        plan = _RequestPlan(
            chat=chat, model=model, prompt_tokens=len(words), max_tokens=max_tokens, arrived=arrived, words=words,
            stall_at=self.rng.randrange(max_tokens) if self.rng.random() < self.faults.stall_rate else None,
            cut_at=self.rng.randrange(max_tokens) if self.rng.random() < self.faults.disconnect_rate else None)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage")) and self.usage
        if body.get("stream"):
            return StreamingResponse(self._stream(plan, include_usage), media_type="text/event-stream")
        n = 0
        async for k in self._timed(plan):
            n += k
        if plan.cut:
            return _error(500, "injected disconnect")
        self._finished(plan, n, "length" if n >= plan.max_tokens else "stop")
        return JSONResponse(plan.whole(n))

    def _fail(self, status: int, message: str, reason: str) -> Any:
        self.metrics.failures.labels(self.models[0], reason).inc()
        return _error(status, message)

    async def _timed(self, plan: _RequestPlan) -> AsyncIterator[int]:
        """Token counts as they become available, with a stall or a cut where the faults put one."""
        sent = 0
        m = self.metrics
        m.running.inc()
        last = None
        try:
            async for k in self.timing.tokens(plan.prompt_tokens, plan.max_tokens, plan.arrived, plan.words,
                                              plan.found):
                if plan.stall_at is not None and sent <= plan.stall_at < sent + k:
                    await asyncio.sleep(self.faults.stall_ms / 1000.0)
                if plan.cut_at is not None and sent <= plan.cut_at < sent + k:
                    self.metrics.failures.labels(self.models[0], "injected_disconnect").inc()
                    plan.cut = True
                    return
                now = time.perf_counter()
                if last is None:
                    m.ttft.observe(now - plan.arrived)
                    plan.first_at = now
                sent += k
                last = now
                yield k
        finally:
            m.running.dec()

    async def _stream(self, plan: _RequestPlan, include_usage: bool) -> AsyncIterator[bytes]:
        if plan.chat:
            yield plan.event({"role": "assistant", "content": ""}, None)
        n = 0
        pending = 0
        last_write: float | None = None
        async for k in self._timed(plan):
            n += k
            pending += k
            if pending < self.tokens_per_chunk and n < plan.max_tokens:
                continue
            now = time.perf_counter()
            if last_write is not None:
                self.metrics.itl.observe(now - last_write)
            last_write = now
            yield plan.event(plan.text(n - pending, pending), "length" if n >= plan.max_tokens else None)
            pending = 0
        if plan.cut:
            return
        reason = "length" if n >= plan.max_tokens else "stop"
        if reason == "stop":
            # The timing ended the answer before max_tokens (a pipeline's last stage, e.g. audio chunks).
            yield plan.event(plan.text(n - pending, pending) if pending else ({"content": ""} if plan.chat else ""),
                             "stop")
        self._finished(plan, n, reason)
        if include_usage:
            yield _sse({"id": plan.id, "object": plan.object, "created": plan.created, "model": plan.model,
                        "choices": [], "usage": plan.usage(n)})
        yield b"data: [DONE]\n\n"

    def _finished(self, plan: _RequestPlan, n: int, reason: str) -> None:
        m = self.metrics
        now = time.perf_counter()
        m.e2e.observe(now - plan.arrived)
        if n > 1 and plan.first_at is not None and m.request_tpot is not None:
            m.request_tpot.observe((now - plan.first_at) / (n - 1))
        m.request_prompt.observe(plan.prompt_tokens)
        m.request_generation.observe(n)
        m.success.labels(self.models[0], m.finished(reason)).inc()
        if m.prompt_tokens is not None:
            m.prompt_tokens.inc(plan.prompt_tokens)
            m.generation_tokens.inc(n)
        if m.cached is not None:
            m.cached.observe(plan.cached)
        if m.cache_queries is not None:
            m.cache_queries.inc(plan.prompt_tokens)
            m.cache_hits.inc(plan.cached)


@dataclass
class _RequestPlan:
    chat: bool
    model: str
    prompt_tokens: int
    max_tokens: int
    arrived: float
    stall_at: int | None
    cut_at: int | None
    cut: bool = False
    first_at: float | None = None
    """When its first token was written (perf_counter)."""
    words: list[str] = field(default_factory=list)
    """The prompt's words (its tokens, as the emulator counts them)."""
    cached: int = 0
    """Prompt tokens its prefill found in the prefix cache."""
    id: str = field(default_factory=lambda: "cmpl-" + uuid.uuid4().hex[:16])
    created: int = field(default_factory=lambda: int(time.time()))

    def found(self, cached: int) -> None:
        self.cached = cached

    @property
    def object(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def text(self, start: int, n: int) -> str:
        return "".join(" " + TOKEN_WORDS[(start + i) % len(TOKEN_WORDS)] for i in range(n))

    def usage(self, n: int) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": n, "total_tokens": self.prompt_tokens + n}

    def event(self, delta_or_text: dict[str, Any] | str, finish: str | None) -> bytes:
        if self.chat:
            delta = delta_or_text if isinstance(delta_or_text, dict) else {"content": delta_or_text}
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": delta_or_text, "logprobs": None, "finish_reason": finish}
        return _sse({"id": self.id, "object": self.object, "created": self.created, "model": self.model,
                     "choices": [choice]})

    def whole(self, n: int) -> dict[str, Any]:
        text = self.text(0, n)
        reason = "length" if n >= self.max_tokens else "stop"
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "finish_reason": reason}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "finish_reason": reason}
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": [choice],
                "usage": self.usage(n)}


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _error(status: int, message: str) -> Any:
    return JSONResponse({"error": {"message": message, "type": "error", "code": status}}, status_code=status)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0 picks a free one); raises OSError when the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and without it
    # Nagle's algorithm holds a small SSE chunk back until the client's delayed ACK (tens of ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def serve(emulator: Emulator, sock: socket.socket, on_ready: Any = None) -> None:
    """Serve until interrupted; `on_ready(url)` hears the address once the socket accepts connections."""
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(emulator.app(), log_level="warning", access_log=False, lifespan="off",
                            timeout_keep_alive=30, backlog=2048)
    server = uvicorn.Server(config)

    async def main() -> None:
        if on_ready is not None:
            shown = f"[{host}]" if ":" in host else host
            on_ready(f"http://{shown}:{port}")
        await server.serve(sockets=[sock])

    asyncio.run(main())
