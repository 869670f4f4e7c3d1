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
their `__init__`, and `dict_maker` dicts of known keys without zipping them.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

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
    `object.__setattr__`, twice as slow as filling the instance's dict at once, which is what the maker does where
    `cls` is a plain dataclass (its fields and nothing else: no `__post_init__`, no slots, no init-less field);
    else it is `cls` itself."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if hasattr(cls, "__post_init__") or "__slots__" in vars(cls) or not all(f.init for f in fields):
        return cls
    names = [f.name for f in fields]
    return _compiled(f"maker({cls.__name__})", names,
                     f"obj = new(cls)\n    obj.__dict__.update({', '.join(f'{n}={n}' for n in names)})\n    return obj",
                     {"new": object.__new__, "cls": cls})


def dict_maker(keys: Sequence[str]) -> Callable[..., dict[str, Any]]:
    """`dict(zip(keys, values))` for values given one by one: a dict display, a third of the time or less."""
    params = [f"v{i}" for i in range(len(keys))]
    return _compiled("dict_maker", params, f"return {{{', '.join(f'{k!r}: {v}' for k, v in zip(keys, params))}}}",
                     {})


def _compiled(name: str, params: Sequence[str], body: str, scope: dict[str, Any]) -> Callable[..., Any]:
    """A function of `params` made from source, as dataclasses make `__init__`: Python checks the arguments, and
    the body fills its dict by keyword or display. The parameters are field names or made here: identifiers."""
    exec(f"def made({', '.join(params)}):\n    {body}\n", scope)  # noqa: S102
    made = scope["made"]
    made.__qualname__ = name
    return made


__all__ = ["collector_paused", "dict_maker", "maker"]
