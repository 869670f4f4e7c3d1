"""The collector pause: off inside, as it was after, what it made handed to the oldest generation, and a cycle made
inside still freed by the next full collection. The maker of plain dataclass instances: equal to the constructor's,
and the constructor itself where a class does more than hold its fields."""

from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest

from infra.perf.heap import collector_paused, dict_maker, maker
from infra.perf.serving import Prediction


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


def test_the_maker_makes_what_the_constructor_makes():
    make = maker(Prediction)
    assert make is not Prediction
    values = ({"mean": 1.0}, {"mean": 0.1}, {"mean": 0.1}, {"mean": 2.0}, 3.0, 30.0, 4.0, 0.5, True, {"agg": 1}, [])
    made = make(*values)
    assert type(made) is Prediction and made == Prediction(*values) and made.__dict__ == Prediction(*values).__dict__
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.batch = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        make(*values[:-1])


def test_a_class_that_does_more_than_hold_its_fields_is_made_by_its_constructor():
    @dataclasses.dataclass(frozen=True)
    class Checked:
        x: float

        def __post_init__(self) -> None:
            assert self.x >= 0

    @dataclasses.dataclass(frozen=True)
    class Derived:
        x: float
        y: float = dataclasses.field(init=False, default=0.0)

    assert maker(Checked) is Checked and maker(Derived) is Derived


def test_the_dict_maker_makes_the_dict_of_its_keys():
    keys = ("mean", "p50", "p99.9", "a key with spaces", "it's")
    make = dict_maker(keys)
    assert make(1.0, 2.0, 3.0, 4.0, 5.0) == dict(zip(keys, (1.0, 2.0, 3.0, 4.0, 5.0)))
    assert list(make(*"abcde")) == list(keys)  # in the keys' order
    with pytest.raises(TypeError):
        make(1.0, 2.0)
