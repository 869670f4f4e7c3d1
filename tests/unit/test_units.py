"""Readable quantities: every accepted notation, and refusals that say what to write instead."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infra.intent import units as u


@pytest.mark.parametrize("text,seconds", [
    ("150ms", 0.15), ("2s", 2.0), ("1.5min", 90.0), ("500us", 5e-4), ("1h", 3600.0), (" 40 ms ", 0.04),
    ("0.25s", 0.25), ("3 seconds", 3.0),
])
def test_durations(text, seconds):
    assert math.isclose(u.parse_duration(text), seconds)


@pytest.mark.parametrize("text,rps", [
    ("40/s", 40), ("2400/min", 40), ("1.2M/day", 1.2e6 / 86400), ("40rps", 40), ("40 req/s", 40),
    ("90 requests/min", 1.5), (40, 40), (2.5, 2.5), ("3k/h", 3000 / 3600), ("40qps", 40),
])
def test_rates(text, rps):
    assert math.isclose(u.parse_rate(text), rps)


@pytest.mark.parametrize("text,n", [("8k", 8000), ("1.5M", 1_500_000), ("8Ki", 8192), (32768, 32768), ("12", 12),
                                    (4096.0, 4096)])
def test_counts(text, n):
    assert u.parse_count(text) == n


@pytest.mark.parametrize("text,n", [("80GiB", 80 * 2**30), ("80GB", 80 * 10**9), ("512Mi", 512 * 2**20),
                                    ("24576MiB", 24576 * 2**20), (1024, 1024)])
def test_bytes(text, n):
    assert u.parse_bytes(text) == n


def test_bandwidth_money_fraction():
    assert u.parse_bandwidth("900GB/s") == 900
    assert u.parse_bandwidth("400Gbps") == 50
    assert u.parse_money_per_hour("$30/h") == 30
    assert u.parse_money_per_hour("$720/day") == 30
    assert u.parse_money_per_hour("30 USD/h") == 30
    assert math.isclose(u.parse_money_per_hour("$21900/month"), 30)
    assert u.parse_money_per_mtok("$0.5/Mtok") == 0.5
    assert u.parse_money_per_mtok("$0.0005/ktok") == 0.5
    assert u.parse_money("$0.002") == 0.002
    assert u.parse_fraction("99%") == 0.99
    assert u.parse_fraction(0.3) == 0.3


@pytest.mark.parametrize("parse,value,fragment", [
    (u.parse_duration, 300, "no unit"),
    (u.parse_duration, "3 parsecs", "unknown time unit"),
    (u.parse_duration, "fast", "not a duration"),
    (u.parse_duration, True, "boolean"),
    (u.parse_duration, "-5ms", "negative"),
    (u.parse_rate, "40/fortnight", "unknown rate unit"),
    (u.parse_rate, "lots", "not a rate"),
    (u.parse_count, "1.5", "whole number"),
    (u.parse_count, "8x", "unknown suffix"),
    (u.parse_count, 2.5, "whole number"),
    (u.parse_bytes, "80 gallons", "unknown size unit"),
    (u.parse_bandwidth, 400, "no unit"),
    (u.parse_bandwidth, "400 furlongs", "unknown bandwidth unit"),
    (u.parse_money_per_hour, "€3/h", "US dollars"),
    (u.parse_money_per_hour, "$3/week", "unknown period"),
    (u.parse_money_per_mtok, "$3/page", "unknown unit"),
    (u.parse_money, "$3/day", "per-request"),
    (u.parse_fraction, "120%", "outside 0..1"),
    (u.parse_fraction, "half", "not a fraction"),
    (u.parse_duration, "nan s", "not a duration"),
    (u.parse_rate, "inf", "not a rate"),
    (u.parse_rate, "1e308/s", "above the 1e\\+06/s one rate may state"),
    (u.parse_rate, 2e6, "split the traffic"),
])
def test_refusals_say_what_to_write(parse, value, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse(value)


@given(st.floats(min_value=1e-6, max_value=1e5, allow_nan=False))
def test_duration_written_back_reads_the_same(x):
    from pydantic import TypeAdapter

    ta = TypeAdapter(u.Duration)
    assert math.isclose(ta.validate_python(ta.dump_python(ta.validate_python(f"{x!r}s"))), x, rel_tol=1e-9)


@given(st.integers(min_value=0, max_value=10**7))
def test_counts_with_k_suffix(n):
    assert u.parse_count(f"{n}k") == n * 1000
