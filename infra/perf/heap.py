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

Making the objects is a good part of such a pass's time too: `maker` builds plain dataclass instances without
their `__init__`.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


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


def maker(cls: type[T]) -> Callable[..., T]:
    """`cls(*values)` with every field given, in order. A frozen dataclass's `__init__` sets each field through
    `object.__setattr__`, a third slower or more than filling the instance's dict at once, which is what the maker
    does where `cls` is a plain dataclass (its fields and nothing else: no `__post_init__`, no slots, no
    init-less field); else it is `cls` itself."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if hasattr(cls, "__post_init__") or "__slots__" in vars(cls) or not all(f.init for f in fields):
        return cls
    names = tuple(f.name for f in fields)
    new = object.__new__

    def make(*values):
        if len(values) != len(names):
            raise TypeError(f"{cls.__name__} takes its {len(names)} fields, given {len(values)}")
        obj = new(cls)
        obj.__dict__.update(zip(names, values))
        return obj

    return make


__all__ = ["collector_paused", "maker"]
