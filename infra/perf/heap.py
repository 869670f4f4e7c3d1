"""Pausing Python's cyclic garbage collector while a computation makes many objects that form no cycles.

The collector runs whenever allocations outnumber deallocations by a threshold, and each of its oldest-generation
passes walks every tracked object alive. A vector pass makes tens of thousands of predictions at once, and scoring
a fleet keeps hundreds of thousands of estimates alive while it makes more: the collector would run over and over,
each time over a larger heap, and free nothing (reference counting frees all of it). Paused, then resumed as it
was found.
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
            gc.enable()


__all__ = ["collector_paused"]
