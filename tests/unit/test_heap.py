"""The collector pause: off inside, as it was after, what it made handed to the oldest generation, and a cycle made
inside still freed by the next full collection."""

from __future__ import annotations

import gc
import weakref

from infra.perf.heap import collector_paused


class _Node:
    pass


def test_the_collector_is_off_inside_and_as_it_was_after():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # an inner pause leaves the outer one's
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # found off, left off
    finally:
        gc.enable()


def test_what_the_pause_kept_is_old_and_a_cycle_it_dropped_is_still_freed():
    with collector_paused():
        kept = [_Node() for _ in range(100)]
        a, b = _Node(), _Node()
        a.other, b.other = b, a  # a cycle only the collector frees
        gone = weakref.ref(a)
        del a, b
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(n) in oldest for n in kept)
    assert gc.get_count()[0] < 100  # no young pass is owed for what the pause made
    assert gone() is not None
    gc.collect()
    assert gone() is None
