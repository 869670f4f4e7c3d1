"""Readable quantities, normalised on load.

Users write `150ms`, `40/s`, `$30/h`, `8k`, `80GiB`; the models store plain numbers in one canonical unit per kind:

| kind       | canonical          | accepted                                                                 |
|------------|--------------------|--------------------------------------------------------------------------|
| duration   | seconds (float)    | `500us`, `150ms`, `2s`, `1.5min`, `1h`; a bare number is refused          |
| rate       | per second (float) | `40/s`, `2400/min`, `1.2M/day`, `40rps`, `40 req/s`; bare number = /s     |
| count      | int                | `8k` (8000), `1.5M`, `8Ki` (8192), `32768`                                |
| bytes      | int                | `80GiB`, `80GB`, `512Mi`, `24576MiB`, bare number = bytes                 |
| bandwidth  | GB/s (float)       | `900GB/s`, `400Gbps`, `25Gb/s`, `64 GB/s`                                 |
| money/hour | USD per hour       | `$30/h`, `30 USD/h`, `$720/day`, `$21900/month` (730 h), bare number      |
| money      | USD                | `$0.002`, `0.5 USD`, bare number                                          |
| fraction   | 0..1 (float)       | `99%`, `0.99`                                                             |

Durations refuse bare numbers because `ttft: 300` could mean seconds or milliseconds; every other kind has one
unit nobody would doubt. `k`/`M`/`G` are decimal (as in "8k context" in model cards, 8000); `Ki`/`Mi` are binary.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

from infra.limits import MAX_SHOWN, shown

_NUM = r"([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"

_DURATION_UNITS = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0,
    "seconds": 1.0, "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0,
    "hr": 3600.0, "hour": 3600.0, "hours": 3600.0,
}
_PER_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "m": 60.0, "h": 3600.0,
              "hr": 3600.0, "hour": 3600.0, "d": 86400.0, "day": 86400.0}
_HOURS = {"h": 1.0, "hr": 1.0, "hour": 1.0, "d": 24.0, "day": 24.0, "mo": 730.0, "month": 730.0}
_SCALE = {"": 1.0, "k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6, "g": 1e9, "G": 1e9, "b": 1e9, "B": 1e9, "t": 1e12,
          "T": 1e12, "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3}
_BYTES = {"": 1, "b": 1, "B": 1, "k": 1e3, "kb": 1e3, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9,
          "GB": 1e9, "T": 1e12, "TB": 1e12, "Ki": 1024, "KiB": 1024, "Mi": 1024**2, "MiB": 1024**2,
          "Gi": 1024**3, "GiB": 1024**3, "Ti": 1024**4, "TiB": 1024**4}


def _bare(value: Any) -> str:
    """A number as written back in a suggestion (`300` -> `300ms`), cut short when absurdly long."""
    text = str(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "…"


def _float(value: int | float, what: str) -> float:
    """float() of a YAML number, refusing integers past float range (`1` and 400 zeros) as a ValueError that
    validation reports, not an OverflowError that escapes it."""
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{shown(value)} is too large for a {what}") from None


def _exact(x: float, raw: Any, what: str) -> float:
    return _at_most(x, MAX_EXACT, raw, f"2^53, the largest {what} a file may state",
                    "no count or size in an intent comes near it")


def _reject_bool(value: Any, what: str) -> None:
    if isinstance(value, bool):
        raise ValueError(f"expected a {what}, got the boolean {shown(value)}")


def _finite(x: float, raw: Any, what: str) -> float:
    if not math.isfinite(x):
        raise ValueError(f"{shown(raw)} is not a finite {what}")
    if x < 0:
        raise ValueError(f"{shown(raw)} is negative; a {what} must be zero or more")
    return x


def _split(raw: Any, what: str, example: str) -> tuple[float, str]:
    text = str(raw).strip()
    m = re.fullmatch(_NUM + r"\s*(.*)", text)
    if not m:
        raise ValueError(f"{shown(raw)} is not a {what}; write e.g. {example}")
    return float(m.group(1)), m.group(2).strip()


def parse_duration(value: Any) -> float:
    """Seconds from `150ms`, `2s`, `1.5min`."""
    _reject_bool(value, "duration")
    if isinstance(value, (int, float)):
        raise ValueError(
            f"{shown(value)} has no unit; write {_bare(value)}ms or {_bare(value)}s so nobody has to guess"
        )
    num, unit = _split(value, "duration", "150ms or 2s")
    if unit == "":
        raise ValueError(f"{shown(value)} has no unit; write {_bare(value)}ms or {_bare(value)}s so nobody has to "
                         "guess")
    if unit not in _DURATION_UNITS:
        raise ValueError(f"{shown(value)}: unknown time unit {shown(unit)}; use us, ms, s, min or h")
    return _at_most(_finite(num * _DURATION_UNITS[unit], value, "duration"), MAX_SECONDS, value,
                    "a year, the longest duration a file may state", "give a shorter duration")


MAX_RATE_RPS = 1e6
"""The most requests per second one rate may state: well above any single service planned today (a million a
second is tens of thousands of replicas), and low enough that replica counts and solver coefficients stay
integers a solver takes."""


def parse_rate(value: Any) -> float:
    """Requests per second from `40/s`, `2400/min`, `1.2M/day`, `40rps` or a bare number, at most
    `MAX_RATE_RPS`."""
    _reject_bool(value, "rate")
    if isinstance(value, (int, float)):
        return _bounded_rate(_finite(_float(value, "rate"), value, "rate"), value)
    text = str(value).strip()
    m = re.fullmatch(_NUM + r"\s*([kKM]?)\s*(?:(rps|qps)|(?:req(?:uest)?s?\s*)?/\s*([a-z]+))?", text)
    if not m:
        raise ValueError(f"{shown(value)} is not a rate; write e.g. 40/s, 2400/min or 1.2M/day")
    num, scale, per = float(m.group(1)), m.group(2).upper(), m.group(4) or "s"
    if per not in _PER_UNITS:
        raise ValueError(f"{shown(value)}: unknown rate unit '/{per}'; use /s, /min, /h or /day")
    return _bounded_rate(_finite(num * _SCALE[scale] / _PER_UNITS[per], value, "rate"), value)


MAX_EXACT = 2 ** 53
"""The largest count or size a file may state: every integer up to it is exact as a float, so the performance
model's float arithmetic on token counts and bytes never rounds or overflows (9e15 tokens, 8 PiB)."""

MAX_SECONDS = 366 * 86400.0
"""The longest duration a file may state, a year: objectives, windows and media lengths are far shorter, and
the arithmetic on them stays finite."""

MAX_MONEY_PER_HOUR = 1e6
"""The most dollars an hour a price or budget may state, after conversion from /day or /month: far above any
cluster's bill, and low enough that costs scaled to tenths of a cent times any device count stay 64-bit
integers the solver takes."""

MAX_MONEY = 1e6
"""The most dollars a price per request or per million tokens may state: budgets in those units become hourly
caps at up to `MAX_RATE_RPS` requests a second, which must stay integers the solver takes."""

MAX_BANDWIDTH_GBS = 1e6
"""The fastest link a file may state, a petabyte a second."""


def _at_most(x: float, limit: float, raw: Any, bound: str, fix: str) -> float:
    if x > limit:
        raise ValueError(f"{shown(raw)} is above {bound}; {fix}")
    return x


MIN_RATE_RPS = 1 / (366 * 86400.0)
"""The slowest rate other than zero one rate may state: one request a year. Below it costs per request and spare
capacity over the demand run past any float."""


def _bounded_rate(rps: float, raw: Any) -> float:
    if 0 < rps < MIN_RATE_RPS:
        raise ValueError(f"{shown(raw)} is {rps:.3g} requests/s, below the one request a year a rate may "
                         "state; give at least that, e.g. 1/day")
    if rps > MAX_RATE_RPS:
        raise ValueError(f"{shown(raw)} is {rps:.3g} requests/s, above the {MAX_RATE_RPS:g}/s one rate may state; "
                         "split the traffic into services")
    return rps


def parse_count(value: Any) -> int:
    """An integer from `8k`, `1.5M`, `8Ki` or a plain number."""
    _reject_bool(value, "count")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{shown(value)} is not a whole number")
    if isinstance(value, (int, float)):
        return int(_exact(_finite(_float(value, "count"), value, "count"), value, "count"))
    num, unit = _split(value, "count", "8k, 1.5M or 32768")
    if unit not in ("", "k", "K", "M", "G", "B", "Ki", "Mi", "Gi"):
        raise ValueError(f"{shown(value)}: unknown suffix {shown(unit)}; use k, M, G for 1000s or Ki, Mi for 1024s")
    x = _exact(_finite(num * _SCALE[unit], value, "count"), value, "count")
    if abs(x - round(x)) > 1e-6:
        raise ValueError(f"{shown(value)} is not a whole number ({x:g})")
    return int(round(x))


def parse_bytes(value: Any) -> int:
    """Bytes from `80GiB`, `80GB`, `512Mi` or a bare number of bytes."""
    _reject_bool(value, "size")
    if isinstance(value, (int, float)):
        return int(_exact(_finite(_float(value, "size"), value, "size"), value, "size"))
    num, unit = _split(value, "size", "80GiB or 512MiB")
    if unit not in _BYTES:
        raise ValueError(f"{shown(value)}: unknown size unit {shown(unit)}; use KiB, MiB, GiB, TiB or KB, MB, GB, TB")
    return int(round(_exact(_finite(num * _BYTES[unit], value, "size"), value, "size")))


def parse_bandwidth(value: Any) -> float:
    """GB/s (decimal bytes) from `900GB/s`, `400Gbps`, `25Gb/s`."""
    _reject_bool(value, "bandwidth")
    if isinstance(value, (int, float)):
        raise ValueError(f"{shown(value)} has no unit; write {_bare(value)}GB/s or {_bare(value)}Gbps")
    num, unit = _split(value, "bandwidth", "900GB/s or 400Gbps")
    unit = unit.replace(" ", "")
    if unit == "":
        raise ValueError(f"{shown(value)} has no unit; write {_bare(value)}GB/s or {_bare(value)}Gbps")
    table = {"GB/s": 1.0, "GBps": 1.0, "TB/s": 1e3, "TBps": 1e3, "MB/s": 1e-3, "Gb/s": 0.125, "Gbps": 0.125,
             "Gbit/s": 0.125, "Tb/s": 125.0, "Tbps": 125.0, "Mb/s": 1.25e-4, "Mbps": 1.25e-4}
    if unit not in table:
        raise ValueError(f"{shown(value)}: unknown bandwidth unit {shown(unit)}; use GB/s for bytes or Gbps for bits")
    return _at_most(_finite(num * table[unit], value, "bandwidth"), MAX_BANDWIDTH_GBS, value,
                    "1e6 GB/s, the fastest link a file may state", "write the link's line rate, e.g. 400Gbps")


def _money(value: Any) -> tuple[float, str]:
    _reject_bool(value, "price")
    if isinstance(value, (int, float)):
        return _finite(_float(value, "price"), value, "price"), ""
    text = str(value).strip()
    if text[:1] in "€£¥":
        raise ValueError(f"{shown(value)}: prices are in US dollars; convert and write e.g. $30/h")
    text = text.removeprefix("$").strip()
    m = re.fullmatch(_NUM + r"\s*(?:USD)?\s*(?:/\s*(\w+))?", text)
    if not m:
        raise ValueError(f"{shown(value)} is not a price; write e.g. $30/h or $0.002")
    return _finite(float(m.group(1)), value, "price"), (m.group(2) or "")


def parse_money_per_hour(value: Any) -> float:
    """USD per hour from `$30/h`, `$720/day`, `$21900/month` or a bare number."""
    amount, per = _money(value)
    if per not in ("", *_HOURS):
        raise ValueError(f"{shown(value)}: unknown period '/{per}'; use /h, /day or /month")
    return _at_most(amount / _HOURS.get(per, 1.0), MAX_MONEY_PER_HOUR, value,
                    "$1e6/h, the most a price or budget may state", "give dollars per hour, e.g. $30/h")


def parse_money_per_mtok(value: Any) -> float:
    """USD per million tokens from `$0.50/Mtok`, `$0.5` or `$0.0000005/tok`, at most `MAX_MONEY`."""
    amount, per = _money(value)
    scale = {"": 1.0, "mtok": 1.0, "mtokens": 1.0, "m": 1.0, "ktok": 1e3, "k": 1e3, "tok": 1e6, "token": 1e6}
    if per.lower() not in scale:
        raise ValueError(f"{shown(value)}: unknown unit '/{per}'; use /Mtok, /ktok or /tok")
    return _at_most(amount * scale[per.lower()], MAX_MONEY, value, "$1e6, the most a price or budget may state",
                    "give dollars per million tokens, e.g. $0.50/Mtok")


def parse_money(value: Any) -> float:
    """USD from `$0.002`, `0.5 USD`, `$0.002/req` or a bare number, at most `MAX_MONEY`."""
    amount, per = _money(value)
    if per.lower() not in ("", "req", "request"):
        raise ValueError(f"{shown(value)}: unknown unit '/{per}' (a per-request price is written $0.002 or "
                         "$0.002/req)")
    return _at_most(amount, MAX_MONEY, value, "$1e6, the most a price or budget may state",
                    "give dollars per request, e.g. $0.002")


def parse_fraction(value: Any) -> float:
    """A fraction in [0, 1] from `99%` or `0.99`."""
    _reject_bool(value, "fraction")
    if isinstance(value, (int, float)):
        x = _float(value, "fraction")
    else:
        num, unit = _split(value, "fraction", "99% or 0.99")
        if unit not in ("", "%"):
            raise ValueError(f"{shown(value)}: write a fraction as 0.3 or 30%")
        x = num / 100 if unit == "%" else num
    if not 0 <= x <= 1:
        raise ValueError(f"{shown(value)} is outside 0..1; write e.g. 0.3 or 30%")
    return x


def _g(x: float) -> str:
    return f"{x:.12g}"


def _dur(x: float) -> str:
    return f"{_g(x * 1000)}ms" if x < 1 else f"{_g(x)}s"


def _quantity(kind: str, pattern: str, parse, description: str, base_type: type = float, show=None):
    """An annotated type: parsed on input, documented in the schema, and (where a bare number would be ambiguous
    or refused) written back in its canonical readable form so that dumped files load again."""
    schema = {
        "anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": pattern}]
        if kind not in ("duration", "bandwidth")
        else [{"type": "string", "pattern": pattern}],
        "description": description,
    }
    extra = [PlainSerializer(show, return_type=str)] if show else []
    return Annotated[base_type, BeforeValidator(parse), WithJsonSchema(schema), *extra]


_N = r"^\s*[+]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*"
Duration = _quantity("duration", _N + r"(ns|us|µs|ms|s|secs?|seconds?|m|mins?|minutes?|h|hr|hours?)\s*$",
                     parse_duration, "A duration such as 150ms, 2s or 1.5min.", show=_dur)
Rate = _quantity("rate", _N + r"[kKM]?\s*(rps|qps|(req(uest)?s?\s*)?/\s*[a-z]+)?\s*$", parse_rate,
                 "Requests per second: 40/s, 2400/min, 1.2M/day, 40rps, or a number of requests per second.",
                 show=lambda x: f"{_g(x)}/s")
Count = _quantity("count", _N + r"(k|K|M|G|B|Ki|Mi|Gi)?\s*$", parse_count,
                  "A whole number, optionally with a suffix: 8k (8000), 1.5M, 8Ki (8192).", int)
Bytes = _quantity("bytes", _N + r"([kKMGT]i?B?|[kKMGT]B|B)?\s*$", parse_bytes,
                  "A size such as 80GiB, 80GB or 512MiB; a bare number is bytes.", int)
Bandwidth = _quantity("bandwidth", _N + r"([GTM]B/s|[GT]Bps|[GTM]b/s|[GTM]bps|Gbit/s)\s*$", parse_bandwidth,
                      "A bandwidth such as 900GB/s or 400Gbps.", show=lambda x: f"{_g(x)}GB/s")
MoneyPerHour = _quantity("money", r"^\s*\$?\s*\d+(\.\d*)?\s*(USD)?\s*(/\s*(h|hr|hour|d|day|mo|month))?\s*$",
                         parse_money_per_hour, "US dollars per hour: $30/h, $720/day, $21900/month, or a number.",
                         show=lambda x: f"${_g(x)}/h")
MoneyPerMTok = _quantity("money", r"^\s*\$?\s*\d*(\.\d*)?\s*(USD)?\s*(/\s*(Mtok|mtok|ktok|tok|token|M))?\s*$",
                         parse_money_per_mtok, "US dollars per million tokens: $0.50/Mtok, or a number.",
                         show=lambda x: f"${_g(x)}/Mtok")
Money = _quantity("money", r"^\s*\$?\s*\d*(\.\d*)?([eE][+-]?\d+)?\s*(USD)?\s*(/\s*(req|request))?\s*$", parse_money,
                  "US dollars: $0.002, $0.002/req, or a number.")
Fraction = _quantity("fraction", _N + r"%?\s*$", parse_fraction, "A fraction: 0.3 or 30%.")
