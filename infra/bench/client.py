"""Async load client for OpenAI-compatible endpoints: drives requests from `workload.generate` and records each
one as a `RequestRecord` under the metric definitions of `metrics.py`.

Timing (all on `time.perf_counter`): `t_sched` is when the load generator planned the request (the open-loop
arrival time, or when a closed-loop client became free); `t_send` is taken after the client's concurrency slot is
held, just before the request is written, so `t_send - t_sched` is the client-side queueing. Every stream is
read line by line and each SSE event is stamped when its line arrives.

A chunk is not a token. A *token chunk* is an SSE event whose first choice carries non-empty `content`,
`reasoning_content`/`reasoning` or `tool_calls` (chat), or non-empty `text` (completions). Role-only chunks,
empty or null content, finish-reason-only chunks, the usage-only chunk and `[DONE]` are not token chunks.
TTFT is send -> first token chunk, E2E is send -> last token chunk, ITL the gaps between token chunks.
Output tokens come from the stream's `usage.completion_tokens` (`stream_options.include_usage` is always sent);
a server that sends no usage gets the number of token chunks, and the record is flagged approximate. A usage
count that cannot be one (not a whole number, negative, or above `MAX_USAGE_TOKENS`), or a usage that is not an
object, is treated as not sent, and the record says which value was refused (`bad_usage`).

Success is HTTP 200, no exception, at least one token chunk and a `finish_reason`; anything else (a non-200
status, a refused connection, a timeout, a stream cut short, an error event) is a failed request that counts
against the objectives. A stream whose events are not the protocol's objects (`choices` not a list of objects) is
a `bad_sse` failure, never an exception.

Every run is bounded in time: no request is sent after `duration_s`, or after `max_wall_s` (`RUN_CAP_S`, an hour)
when no duration is given, and each request in flight ends by its timeout; warm-up has the same bound of its own.
A run cut short by either says so in `BenchRun.cut_short`.

Prompts are built without the served model's tokenizer: one short common English word followed by a space is
about one token for the BPE and SentencePiece vocabularies of current LLMs, so a prompt for N input tokens is N
such words. Requests of one prefix group start with the same words for their shared prefix. The server's
`usage.prompt_tokens` is what the record keeps when the server reports it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from infra.bench.metrics import RequestRecord
from infra.bench.observe import prefix_hit_between
from infra.bench.scrape import histogram_totals, server_means
from infra.bench.workload import Load, RequestSpec
from infra.errors import EndpointError, Location, Problem

WORDS = ("the of and to in is on it at as be by or an we us so if no up go do my he me all can new one two day "
         "way sun red sea map key box car dog cat run big old set top man far art").split()
"""Short, frequent words: each is one token (with its leading space) in the common LLM vocabularies."""

Progress = Callable[[int, int], None]
LAG_PROBE_S = 0.005
RUN_CAP_S = 3600.0
"""Longest a run sends requests when no duration is given: an hour covers the default 100 requests at rates down
to one every 36 s, and a run stuck on a slow arrival process still ends."""
MAX_USAGE_TOKENS = 10_000_000
"""Largest usage count believed for one request: above the longest context any served model has (10M tokens)."""


@dataclass(frozen=True)
class ClientOptions:
    """How to reach the endpoint and shape each request."""

    url: str
    """Base URL of the server (`http://host:port` or `http://host:port/v1`)."""
    model: str | None = None
    """Served model name; None takes the first one `/v1/models` lists."""
    api: Literal["chat", "completions"] = "chat"
    timeout_s: float = 60.0
    """Longest a single request may take, connection to last byte; past it the request fails as a timeout."""
    api_key: str | None = None
    ignore_eos: bool = True
    """Send `ignore_eos` so the answer runs to `max_tokens` (vLLM, SGLang and llama-server accept it)."""
    min_tokens: bool = False
    """Also send `min_tokens = max_tokens` (vLLM)."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """More request fields, sent as given."""
    warmup: int = 0
    """Requests sent before the measurement and left out of it."""
    duration_s: float | None = None
    """No request is sent after this many seconds from the start (those in flight finish, bounded by the
    timeout)."""
    max_connections: int = 1024
    """Open loop: requests in flight at most (the connection pool's size); later arrivals wait for a slot, and
    the wait shows as client_queue."""
    seed: int = 0
    """Seeds the prompt words."""
    max_wall_s: float = RUN_CAP_S
    """Without `duration_s`, no request is sent after this many seconds from the start (warm-up: from its own)."""


@dataclass
class BenchRun:
    """What a run measured."""

    records: list[RequestRecord]
    """Measured requests, in the order they were planned."""
    warmup: list[RequestRecord]
    model: str
    url: str
    api: str
    load: Load
    wall_s: float
    """From the first measured send to the end of the run."""
    client_queue_s: list[float] = field(default_factory=list)
    """t_send - t_sched of every measured request."""
    server: dict[str, dict[str, float]] = field(default_factory=dict)
    """The engine's own mean TTFT/ITL/E2E over the measured requests, from its /metrics (empty without one)."""
    loop_lag_s: list[float] = field(default_factory=list)
    """How late the client's event loop woke a probe that sleeps `LAG_PROBE_S` at a time, during the measurement:
    a chunk that arrives waits about this long before it is stamped, so it bounds the client's timing error."""
    cut_short: str | None = None
    """Why fewer requests were sent than planned (the duration, or the run's time bound); None when all were."""
    prefix_hit: float | None = None
    """Share of the prompt tokens the server's prefix cache held over the measured requests (`--warmup`'s apart),
    from its /metrics counters; None where it does not count them."""


def base_url(url: str) -> str:
    """`http://h:p`, `http://h:p/` and `http://h:p/v1/` all mean `http://h:p/v1`."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def prompt_words(spec: RequestSpec, seed: int = 0) -> list[str]:
    """The prompt's words: the prefix group's shared words, then words of this request alone."""
    shared = random.Random(f"{seed}-group-{spec.prefix_group}")
    own = random.Random(f"{seed}-request-{spec.index}")
    n_shared = min(spec.prefix_tokens, spec.input_tokens)
    words = [shared.choice(WORDS) for _ in range(n_shared)]
    words += [own.choice(WORDS) for _ in range(spec.input_tokens - n_shared)]
    return words


def request_body(spec: RequestSpec, opts: ClientOptions, model: str) -> dict[str, Any]:
    """The JSON body asking for `spec.output_tokens` tokens of a streamed answer."""
    text = " ".join(prompt_words(spec, opts.seed))
    body: dict[str, Any] = {"model": model, "stream": True, "stream_options": {"include_usage": True},
                            "max_tokens": spec.output_tokens, "temperature": 0.0}
    if opts.api == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    if opts.ignore_eos:
        body["ignore_eos"] = True
    if opts.min_tokens:
        body["min_tokens"] = spec.output_tokens
    body.update(opts.extra_body)
    return body


def _is_token_chunk(choice: dict[str, Any]) -> bool:
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return False
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                or delta.get("tool_calls"))


class StreamState:
    """One streamed answer as its SSE lines arrive; `record()` turns it into a RequestRecord."""

    __slots__ = ("t_send", "first_event", "token_times", "finish_reason", "usage", "error", "done")

    def __init__(self, t_send: float):
        self.t_send = t_send
        self.first_event: float | None = None
        self.token_times: list[float] = []
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.error: str | None = None
        self.done = False

    def feed(self, line: str, t: float) -> None:
        """One line of the event stream, received at `t`. Comments, `event:` and blank lines carry no data."""
        if not line.startswith("data:") or self.error is not None:
            return
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return
        if self.first_event is None:
            self.first_event = t
        try:
            obj = json.loads(data)
        except ValueError:
            self.error = f"bad_sse: not JSON: {data[:80]!r}"
            return
        except RecursionError:  # nesting deep enough to exhaust the decoder: no protocol event looks like that
            self.error = f"bad_sse: nested too deeply: {data[:40]!r}"
            return
        if not isinstance(obj, dict):
            self.error = f"bad_sse: not an object: {data[:80]!r}"
            return
        if obj.get("error"):
            err = obj["error"]
            self.error = f"stream_error: {err.get('message', err) if isinstance(err, dict) else err}"
            return
        if obj.get("usage") not in (None, {}):
            self.usage = obj["usage"]
        choices = obj.get("choices")
        if choices is None:
            return
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            self.error = f"bad_sse: choices is not a list of objects: {data[:80]!r}"
            return
        if choices:
            choice = choices[0]
            if _is_token_chunk(choice):
                self.token_times.append(t)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def record(self, index: int, t_sched: float, input_tokens: int) -> RequestRecord:
        """The request's record; `input_tokens` is used when the server reports no usable prompt tokens."""
        usage = self.usage if isinstance(self.usage, dict) else {}
        n_in, bad_in = _usage_count(usage, "prompt_tokens")
        n_out, bad_out = _usage_count(usage, "completion_tokens")
        bad_whole = None if self.usage is None or usage else f"usage {json.dumps(self.usage)[:40]}"
        bad = "; ".join(b for b in (bad_whole, bad_in, bad_out) if b) or None
        error = self.error
        if error is None and not self.token_times:
            error = "empty: the stream carried no token"
        if error is None and self.finish_reason is None:
            error = "truncated: the stream ended without a finish_reason"
        if error is not None:
            return RequestRecord(index, t_sched, self.t_send, input_tokens=n_in or input_tokens, error=error,
                                 ttft_any=self._since(self.first_event), bad_usage=bad)
        times = self.token_times
        return RequestRecord(
            index, t_sched, self.t_send, ttft=times[0] - self.t_send, e2e=times[-1] - self.t_send,
            input_tokens=n_in or input_tokens, output_tokens=n_out or len(times),
            itl=tuple(b - a for a, b in zip(times, times[1:])), approximate=not n_out,
            ttft_any=self._since(self.first_event), bad_usage=bad)

    def _since(self, t: float | None) -> float | None:
        return None if t is None else t - self.t_send


def _model_ids(resp: httpx.Response) -> list[str]:
    """The model names a `/v1/models` answer lists; none when it is not the protocol's object."""
    try:
        data = resp.json()
    except (ValueError, RecursionError):
        return []
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list):
        return []
    return [m["id"] for m in models if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]]


async def _head(resp: httpx.Response, n: int) -> bytes:
    """The first `n` bytes of an error answer: enough to say what went wrong, and a huge body is not read."""
    head = b""
    async for chunk in resp.aiter_bytes():
        head += chunk
        if len(head) >= n:
            break
    return head[:n]


def _usage_count(usage: dict[str, Any], key: str) -> tuple[int | None, str | None]:
    """(the count, None), (None, None) when absent or 0, or (None, why) when the value cannot be a token count:
    a server's bug must not become a mean of -1 tokens."""
    value = usage.get(key)
    if value is None or value == 0:
        return None, None
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or not 0 < value <= MAX_USAGE_TOKENS:
        return None, f"{key} {json.dumps(value)[:40]}"
    return int(value), None


class LoadClient:
    """Sends requests over keep-alive HTTP/1.1 connections, as many as requests in flight (the closed loop's
    clients, or the open loop's `max_connections` at most), and records them.

    Each connection is an httpx client of its own with a pool of one, lent to one request at a time: httpx's
    shared pool scans every connection on every request event, which costs more CPU than the requests themselves
    at hundreds of connections; a free list of single connections costs the same at any size."""

    def __init__(self, opts: ClientOptions):
        self.opts = opts
        self.base = base_url(opts.url)
        self.tls = ssl.create_default_context()
        """One TLS context for every connection: building one reads the CA bundle (tens of ms)."""
        self.http = self._connection()
        self.idle: list[httpx.AsyncClient] = []
        self.opened: list[httpx.AsyncClient] = []
        self.path = "/chat/completions" if opts.api == "chat" else "/completions"
        self.model = opts.model or ""

    def _connection(self) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.opts.api_key}"} if self.opts.api_key else {}
        return httpx.AsyncClient(headers=headers, http1=True, http2=False, trust_env=False, verify=self.tls,
                                 limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                                 timeout=httpx.Timeout(self.opts.timeout_s))

    async def __aenter__(self) -> LoadClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for conn in [self.http, *self.opened]:
            await conn.aclose()

    async def discover(self) -> str:
        """Check that the endpoint answers and settle the model name (the first listed unless one was given)."""
        url = self.base + "/models"
        try:
            # httpx's timeout bounds each read, not the whole answer: a server trickling bytes must end too.
            async with asyncio.timeout(self.opts.timeout_s):
                resp = await self.http.get(url)
        except TimeoutError:
            raise EndpointError(Problem(f"{url} did not answer within {self.opts.timeout_s:g} s",
                                        Location(path="--endpoint"),
                                        "check that the server is up, or give a longer --timeout")) from None
        except httpx.HTTPError as exc:
            raise EndpointError(Problem(f"cannot reach {url}: {type(exc).__name__}: {exc}".rstrip(": "),
                                        Location(path="--endpoint"),
                                        "start the server or check the URL and port")) from None
        if resp.status_code in (401, 403):
            raise EndpointError(Problem(f"{url} refused the API key (HTTP {resp.status_code})",
                                        Location(path="--endpoint"),
                                        "set INFRA_BENCH_API_KEY (or OPENAI_API_KEY) to a key the server accepts"))
        if self.opts.model:
            self.model = self.opts.model
            return self.model
        ids = _model_ids(resp) if resp.status_code == 200 else []
        if not ids:
            raise EndpointError(Problem(f"{url} lists no model (HTTP {resp.status_code})",
                                        Location(path="--model"), "name the served model with --model"))
        self.model = ids[0]
        return self.model

    async def scrape(self) -> str:
        """The server's Prometheus /metrics text, or nothing ("") when it has none."""
        try:
            async with asyncio.timeout(self.opts.timeout_s):
                resp = await self.http.get(self.base.removesuffix("/v1") + "/metrics")
            if resp.status_code != 200:
                return ""
            histogram_totals(resp.text)  # text the parser refuses is no /metrics
            return resp.text
        except (httpx.HTTPError, ValueError, TimeoutError):
            return ""

    async def send(self, spec: RequestSpec, t_sched: float) -> RequestRecord:
        """One streamed request; never raises for what the server or the network does."""
        body = json.dumps(request_body(spec, self.opts, self.model)).encode()
        t_send = time.perf_counter()
        state = StreamState(t_send)
        perf = time.perf_counter
        if self.idle:
            conn = self.idle.pop()
        else:
            conn = self._connection()
            self.opened.append(conn)
        try:
            async with asyncio.timeout(self.opts.timeout_s):
                async with conn.stream("POST", self.base + self.path, content=body,
                                       headers={"Content-Type": "application/json"}) as resp:
                    if resp.status_code != 200:
                        text = (await _head(resp, 200)).decode("utf-8", "replace").strip()
                        state.error = f"http_{resp.status_code}: {text}"
                    else:
                        async for line in resp.aiter_lines():
                            state.feed(line, perf())
        except TimeoutError:
            state.error = f"timeout: no complete answer within {self.opts.timeout_s:g} s"
        except httpx.RemoteProtocolError as exc:
            state.error = state.error or f"truncated: {exc}"
        except httpx.HTTPError as exc:
            state.error = state.error or f"{type(exc).__name__.lower()}: {exc}"
        finally:
            self.idle.append(conn)
        return state.record(spec.index, t_sched, spec.input_tokens)


async def _closed_loop(client: LoadClient, specs: Sequence[RequestSpec], clients: int, deadline: float | None,
                       done: Callable[[RequestRecord], None]) -> None:
    pending = iter(specs)

    async def worker() -> None:
        t_free = time.perf_counter()
        for spec in pending:
            if deadline is not None and t_free >= deadline:
                return
            done(await client.send(spec, t_free))
            t_free = time.perf_counter()

    await asyncio.gather(*(worker() for _ in range(max(1, clients))))


async def _open_loop(client: LoadClient, specs: Sequence[RequestSpec], slots: int, deadline: float | None,
                     done: Callable[[RequestRecord], None]) -> None:
    sem = asyncio.Semaphore(slots)
    t0 = time.perf_counter()

    async def fire(spec: RequestSpec, t_sched: float) -> None:
        async with sem:
            done(await client.send(spec, t_sched))

    tasks = []
    for spec in specs:
        target = t0 + (spec.at or 0.0)
        if deadline is not None and target >= deadline:
            break
        delay = target - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(fire(spec, target)))
    await asyncio.gather(*tasks)


async def _loop_lag(out: list[float]) -> None:
    while True:
        t = time.perf_counter()
        await asyncio.sleep(LAG_PROBE_S)
        out.append(max(0.0, time.perf_counter() - t - LAG_PROBE_S))


async def run_async(load: Load, opts: ClientOptions, progress: Progress | None = None) -> BenchRun:
    """Drive `load` against the endpoint: warm-up first (not measured), then the load, open or closed loop, each
    bounded in time (`duration_s`, else `max_wall_s`)."""
    closed = load.concurrency is not None
    slots = max(1, load.concurrency or 1) if closed else max(1, opts.max_connections)
    async with LoadClient(opts) as client:
        model = await client.discover()
        warm: list[RequestRecord] = []
        warm_specs = [RequestSpec(-1 - i, None, s.input_tokens, s.output_tokens, s.prefix_group, s.prefix_tokens)
                      for i, s in enumerate(itertools.islice(itertools.cycle(load.requests), opts.warmup))]
        if warm_specs:
            await _closed_loop(client, warm_specs, min(slots, len(warm_specs)),
                               time.perf_counter() + opts.max_wall_s, warm.append)
        records: list[RequestRecord] = []
        total = len(load.requests)

        def done(rec: RequestRecord) -> None:
            records.append(rec)
            if progress is not None:
                progress(len(records), total)

        before = await client.scrape()
        lags: list[float] = []
        probe = asyncio.create_task(_loop_lag(lags))
        t0 = time.perf_counter()
        deadline = t0 + (opts.duration_s or opts.max_wall_s)
        if closed:
            await _closed_loop(client, load.requests, slots, deadline, done)
        else:
            await _open_loop(client, load.requests, slots, deadline, done)
        wall = time.perf_counter() - t0
        probe.cancel()
        after = await client.scrape() if before else ""
        server = server_means(_finite(before), _finite(after)) if after else {}
        try:
            prefix_hit = prefix_hit_between(before, after) if after else None
        except (ValueError, KeyError):  # a counter or bucket no engine writes: the server says nothing usable
            prefix_hit = None
    records.sort(key=lambda r: r.index)
    return BenchRun(records, warm, model, client.base, opts.api, load, wall,
                    [r.t_send - r.t_sched for r in records], server, lags,
                    _cut_short(len(records), total, len(warm), len(warm_specs), opts), prefix_hit)


def _finite(text: str) -> dict[str, tuple[float, float]]:
    """A scrape's latency histograms (sum, count), the server's word only: a NaN or infinite total would turn its
    means into NaN (and its counts into an overflow), so such a histogram counts as not exported."""
    return {k: v for k, v in histogram_totals(text).items() if all(map(math.isfinite, v))}


def _cut_short(sent: int, planned: int, warm_sent: int, warm_planned: int, opts: ClientOptions) -> str | None:
    """Why the run sent fewer requests than planned, or None."""
    why = []
    if sent < planned:
        bound = f"--duration {opts.duration_s:g} s" if opts.duration_s else \
            f"the {opts.max_wall_s:g} s bound of a run without --duration"
        why.append(f"sent {sent} of {planned} planned requests: {bound} ended the sending")
    if warm_sent < warm_planned:
        why.append(f"sent {warm_sent} of {warm_planned} warm-up requests within the {opts.max_wall_s:g} s bound")
    return "; ".join(why) or None


def run(load: Load, opts: ClientOptions, progress: Progress | None = None) -> BenchRun:
    """Blocking form of `run_async`."""
    return asyncio.run(run_async(load, opts, progress))
