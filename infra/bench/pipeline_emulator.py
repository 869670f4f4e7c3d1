"""A pipeline service served in real time by the emulator: each request runs through the plan's stages as
concurrent tasks that hand on asynchronously, as the stage-by-stage simulator (`infra.bench.pipeline`) models it.

- LLM stages run on their plan entries' engines, stepped in real time (`EngineTiming`); the last LLM stage takes
  the client's prompt and `max_tokens` when it is the last stage, the others draw their lengths from their own
  stage workloads (seeded, as the simulator does).
- Encoders, codecs and DiTs are servers timed by the stage model, one request at a time each, FIFO (an asyncio
  lock per server wakes its waiters in order), picked at random as a Service does; a request stays on its
  server; a stage whose first output comes early works in chunks of that size, each waiting until the stages
  before it have produced their share.
- CPU stages are `cpu_cores` such servers.
- A stage starts when each stage feeding it has handed on (its first output when it streams, else its end) plus
  the plan's hand-off transfer time; it cannot finish before its input has.

The client sees the last stage: an LLM's tokens as they come, or a codec's/DiT's outputs (one per chunk). So a
load client measures the pipeline's TTFT (first audio chunk) and E2E as the pipeline's objectives define them.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from infra.bench.emulator import EngineTiming
from infra.bench.pipeline import LENGTH_DRAWS, _cpu_time, _handoff, _pipeline, _stage_servers, stage_lengths
from infra.bench.simulate import plan_groups, plan_policy
from infra.catalog.loader import load_catalog
from infra.perf.stages import chunks_of


class _Progress:
    """How much of a stage's output exists (0..1), for the stage after it to wait on."""

    def __init__(self) -> None:
        self.done = 0.0
        self.changed = asyncio.Condition()

    async def advance(self, fraction: float) -> None:
        async with self.changed:
            self.done = max(self.done, fraction)
            self.changed.notify_all()

    async def reach(self, fraction: float) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: self.done >= fraction - 1e-12)


class _Joined:
    """The inputs of a stage fed by several: a share of its input exists when that share of each exists."""

    def __init__(self, parts: list[_Progress]):
        self.parts = parts

    async def reach(self, fraction: float) -> None:
        for p in self.parts:
            await p.reach(fraction)


class _Servers:
    """Replicas (or cores) of a stage that is not an LLM."""

    def __init__(self, servers: list[tuple[float, float]], first_fraction: float, spread: random.Random | None = None):
        self.servers = servers
        self.spread = spread
        """Replicas behind a Service are picked at random; the cores of a CPU stage take the least busy."""
        self.first_fraction = first_fraction
        self.chunks = chunks_of(first_fraction)
        self.locks: list[asyncio.Lock] | None = None
        self.holding = [0] * len(servers)

    async def run(self, upstream: _Progress | _Joined, out: _Progress) -> None:
        if self.locks is None:
            self.locks = [asyncio.Lock() for _ in self.servers]
        s = self.spread.randrange(len(self.servers)) if self.spread is not None else \
            min(range(len(self.servers)), key=lambda i: (self.holding[i], i))
        self.holding[s] += 1
        work, fixed = self.servers[s]
        try:
            for j in range(self.chunks):
                await upstream.reach(1.0 if self.chunks == 1 else j / (self.chunks - 1))
                if self.chunks == 1:
                    dur = work + fixed
                elif j == 0:
                    dur = self.first_fraction * work + fixed
                else:
                    dur = work * (1 - self.first_fraction) / (self.chunks - 1)
                async with self.locks[s]:
                    await asyncio.sleep(dur)
                await out.advance((j + 1) / self.chunks)
        finally:
            self.holding[s] -= 1


class _LLM:
    """An LLM stage on its plan entry's engines."""

    def __init__(self, timing: Any, lengths: list[tuple[int, int]]):
        self.timing = timing
        self.lengths = itertools.cycle(lengths)

    async def run(self, upstream: _Progress | _Joined, out: _Progress, prompt: int | None = None,
                  max_tokens: int | None = None, client: asyncio.Queue[int] | None = None) -> None:
        isl, osl = next(self.lengths)
        isl, osl = prompt or isl, max_tokens or osl
        made = 0
        async for n in self.timing.tokens(isl, osl, time.perf_counter()):
            made += n
            if made >= osl:
                # The last token waits for the last of the input.
                await upstream.reach(1.0)
            await out.advance(min(1.0, made / osl))
            if client is not None:
                client.put_nowait(n)
        await upstream.reach(1.0)
        await out.advance(1.0)


class PipelineTiming:
    """The emulator's `Timing` for a pipeline service of a plan."""

    def __init__(self, plan: Any, service: str, catalog: Any = None, seed: int = 0):

        catalog = catalog or load_catalog()
        self.pipe = _pipeline(plan, service)
        self.inputs = self.pipe.inputs()
        self.stages: list[Any] = []
        for k, st in enumerate(self.pipe.stages):
            if st.kind == "llm":
                # The simulator's draws for the same seed, in the same order.
                lengths = stage_lengths(plan, st.unit, LENGTH_DRAWS, seed + 1 + k)
                self.stages.append(_LLM(EngineTiming(plan_groups(plan, st.unit, catalog), plan_policy(plan, st.unit)),
                                        [(r.input_tokens, r.output_tokens) for r in lengths]))
            elif st.kind == "cpu":
                self.stages.append(_Servers([(_cpu_time(st.work), 0.0)] * int(st.cpu_cores or 1), 1.0))
            else:
                servers, fraction = _stage_servers(plan, next(s for s in plan.spec.services if s.name == st.unit),
                                                   st.work, catalog)
                self.stages.append(_Servers(servers, fraction, random.Random(seed + 101 + k)))

    def rejects(self, prompt_tokens: int, max_tokens: int) -> str | None:
        last = self.stages[-1]
        if isinstance(last, _LLM):
            return last.timing.rejects(prompt_tokens, max_tokens)
        return None

    async def _stage(self, k: int, start: _Progress, outs: list[_Progress], prompt: int, max_tokens: int,
                     client: asyncio.Queue[int] | None) -> None:
        stage, out = self.stages[k], outs[k]

        async def handed(i: int) -> None:
            before = self.pipe.stages[i]
            lead, tail = _handoff(before)
            await outs[i].reach(1e-9 if before.streams else 1.0)
            await asyncio.sleep(lead if before.streams else tail)

        ins = self.inputs[k]
        await asyncio.gather(*(handed(i) for i in ins))
        upstream: _Progress | _Joined = _Joined([outs[i] for i in ins]) if ins else start
        if isinstance(stage, _LLM):
            last = k == len(self.stages) - 1
            await stage.run(upstream, out, prompt if last else None, max_tokens if last else None, client)
        else:
            await stage.run(upstream, out)

    async def tokens(self, prompt_tokens: int, max_tokens: int, arrived: float, prompt: Sequence[str] = (),
                     found: Callable[[int], None] | None = None) -> AsyncIterator[int]:
        """The last stage's tokens as the pipeline makes them (its prompt's words and their prefix-cache hits are
        not followed)."""
        start = _Progress()
        await start.advance(1.0)
        client: asyncio.Queue[int] = asyncio.Queue()
        outs = [_Progress() for _ in self.stages]
        last = self.stages[-1]
        tasks = [asyncio.create_task(self._stage(k, start, outs, prompt_tokens, max_tokens,
                                                 client if k == len(self.stages) - 1 and isinstance(last, _LLM)
                                                 else None)) for k in range(len(self.stages))]
        try:
            if isinstance(last, _LLM):
                while not (tasks[-1].done() and client.empty()):
                    getter = asyncio.create_task(client.get())
                    await asyncio.wait({getter, tasks[-1]}, return_when=asyncio.FIRST_COMPLETED)
                    if getter.done():
                        yield getter.result()
                    else:
                        getter.cancel()
            else:
                chunks = last.chunks
                for j in range(chunks):
                    await outs[-1].reach((j + 1) / chunks)
                    yield 1
            for t in tasks:
                await t
        finally:
            for t in tasks:
                t.cancel()
