"""Pausing Python's cyclic garbage collector while a computation makes many objects that form no cycles.

The collector runs whenever allocations outnumber deallocations by a threshold, and each of its oldest-generation
passes walks every tracked object alive. A vector pass makes tens of thousands of predictions at once, and scoring
a fleet keeps hundreds of thousands of estimates alive while it makes more: the collector would run over and over,
each time over a larger heap, and free nothing (reference counting frees all of it). Paused, then resumed as it
was found.

What the pause made and kept is the planner's caches and results, alive as long as the plan is: resumed as it was,
the collector's first pass would walk all of it as young objects (3 s of a 500-service plan, to free nothing), and
walk it again as it aged. It is handed to the oldest generation instead (`gc.freeze` then `gc.unfreeze`, which
moves every tracked object there without a pass), where the next full collection sees it as it sees the rest of
the heap, and frees any cycle in it then.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.freeze()
            gc.unfreeze()
            gc.enable()


__all__ = ["collector_paused"]
