"""The facts of a plan, each with an id and its figure, and the check that holds a model's prose to them.

Only these facts (all read from plan.yaml) may carry numbers into an explanation: the template renders them, and
a model's rephrasing is accepted only if every number it writes is one of them, up to the rounding it shows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infra.planner.types import Allocation, DeploymentPlan


@dataclass(frozen=True)
class Fact:
    id: str
    text: str
    value: float | None = None
    percent: bool = False
    """The value is a fraction that prose may write as a percentage (0.83 as 83%)."""


def _g(x: float) -> str:
    return f"{x:g}"


def _layout(a: Allocation) -> str:
    p = a.parallel
    parts = [f"tp{p.tp}"] + [f"{k}{v}" for k, v in (("pp", p.pp), ("ep", p.ep), ("dp", p.attention_dp)) if v > 1]
    text = f"{a.mode} {' '.join(parts)}"
    if a.mode == "disagg":
        text += f" ({a.prefill_workers} prefill + {a.decode_workers} decode workers)"
    if a.share:
        text += f" on {_g(a.share)} of a device"
    return text


def plan_facts(plan: DeploymentPlan) -> list[Fact]:
    """Every figure an explanation may use, in a stable order."""
    spec = plan.spec
    facts = [Fact("cost.per_hour", f"total cost ${_g(spec.cost.per_hour)}/h", spec.cost.per_hour),
             Fact("solver.considered", f"{spec.solver.considered} shapes considered, {spec.solver.candidates} "
                                       f"candidates kept ({spec.solver.status})", spec.solver.considered)]
    for pool, cost in sorted(spec.cost.by_pool.items()):
        facts.append(Fact(f"cost.pool.{pool}", f"pool {pool} costs ${_g(cost)}/h", cost))
    for svc in spec.services:
        s = f"svc.{svc.name}"
        facts += [
            Fact(f"{s}.demand", f"{svc.name} peak demand {_g(svc.demand.value)} {svc.demand.unit}", svc.demand.value),
            Fact(f"{s}.required", f"{svc.name} required capacity {_g(svc.required.value)} {svc.required.unit}",
                 svc.required.value),
            Fact(f"{s}.capacity", f"{svc.name} planned capacity {_g(svc.capacity.value)} {svc.capacity.unit}",
                 svc.capacity.value),
            Fact(f"{s}.headroom", f"{svc.name} capacity is {_g(round(svc.headroom * 100, 1))}% above the required",
                 svc.headroom, percent=True),
            Fact(f"{s}.served", f"{svc.name} serves {_g(round(svc.served * 100, 2))}% of peak demand", svc.served,
                 percent=True),
            Fact(f"{s}.cost_per_hour", f"{svc.name} costs ${_g(svc.cost_per_hour)}/h", svc.cost_per_hour),
        ]
        if svc.confidence is not None:
            facts.append(Fact(f"{s}.confidence",
                              f"{svc.name} objectives planned at {_g(round(svc.confidence * 100, 2))}% confidence",
                              svc.confidence, percent=True))
        if svc.cost_per_million_tokens is not None:
            facts.append(Fact(f"{s}.cost_per_million_tokens",
                              f"{svc.name} costs ${_g(svc.cost_per_million_tokens)} per million tokens",
                              svc.cost_per_million_tokens))
        if svc.cost_per_request is not None:
            facts.append(Fact(f"{s}.cost_per_request", f"{svc.name} costs ${_g(svc.cost_per_request)} per request",
                              svc.cost_per_request))
        for i, a in enumerate(svc.allocations):
            at = f"{s}.alloc{i}"
            facts.append(Fact(f"{at}.replicas",
                              f"{svc.name}: {a.replicas} x {a.device} ({a.framework}, {a.precision}, {_layout(a)}) on "
                              f"pool {a.pool}, {_g(a.devices)} devices, ${_g(a.cost_per_hour)}/h", a.replicas))
            facts.append(Fact(f"{at}.devices", f"{_g(a.devices)} devices", a.devices))
            facts.append(Fact(f"{at}.cost_per_hour", f"${_g(a.cost_per_hour)}/h", a.cost_per_hour))
            facts.append(Fact(f"{at}.load_per_replica",
                              f"each replica carries {_g(a.load_per_replica)} of {_g(a.capacity_per_replica)} "
                              f"{svc.demand.unit} it could", a.load_per_replica))
            facts.append(Fact(f"{at}.capacity_per_replica", f"{_g(a.capacity_per_replica)} per replica",
                              a.capacity_per_replica))
            for key, obj in sorted(a.predicted.items()):
                facts.append(Fact(f"{at}.{key}.target_ms", f"{key} target {_g(obj.target_ms)} ms", obj.target_ms))
                facts.append(Fact(f"{at}.{key}.predicted_ms", f"{key} predicted {_g(obj.predicted_ms)} ms",
                                  obj.predicted_ms))
                facts.append(Fact(f"{at}.{key}.margin", f"{key} margin {_g(round(obj.margin * 100, 2))}%",
                                  obj.margin, percent=True))
                if obj.held_out is not None:
                    facts.append(Fact(f"{at}.{key}.held_out",
                                      f"{key}: a margin this size held for {_g(round(obj.held_out * 100, 2))}% of "
                                      "held-out models' measurements", obj.held_out, percent=True))
    for i, text in enumerate(spec.binding):
        facts.append(Fact(f"binding.{i}", text))
    for i, alt in enumerate(spec.alternatives):
        facts.append(Fact(f"alt.{i}.cost_per_hour", f"{alt.label}: ${_g(alt.cost_per_hour)}/h "
                                                    f"({'+' if alt.delta_per_hour >= 0 else ''}"
                                                    f"${_g(alt.delta_per_hour)}/h), uses {'; '.join(alt.uses)}",
                          alt.cost_per_hour))
        facts.append(Fact(f"alt.{i}.delta_per_hour", f"${_g(alt.delta_per_hour)}/h", alt.delta_per_hour))
    return facts


# A number standing on its own: not part of a name such as p99, RTX-4090, Qwen3-8B or fp8.
_NUMBER = re.compile(r"(?<![\w.\-])[-+]?\d(?:\d|,\d{3})*(?:\.\d+)?")


def numbers_in(text: str) -> list[str]:
    """The numbers written in `text` (as written), leaving names that contain digits alone."""
    out = []
    for m in _NUMBER.finditer(text):
        token = m.group(0)
        end = m.end()
        # A digit run glued to letters (8B, tp1, 4k) is a name or a unit-suffixed figure; keep plain units only.
        tail = text[end:end + 3]
        if tail[:1].isalpha() and not re.match(r"(ms|s\b|h\b|x\b|k\b|%)", tail):
            continue
        out.append(token)
    return out


def _matches(token: str, value: float) -> bool:
    clean = token.replace(",", "").lstrip("+")
    n = float(clean)
    decimals = len(clean.split(".")[1]) if "." in clean else 0
    tolerance = 0.5 * 10 ** -decimals + 1e-9
    return abs(n - value) <= tolerance or abs(abs(n) - abs(value)) <= tolerance


def allowed_values(facts: list[Fact]) -> list[float]:
    """Every value prose may cite: the facts' figures (fractions also as percentages), the numbers in their
    texts, and milliseconds also as seconds."""
    values: list[float] = []
    for f in facts:
        if f.value is not None:
            values.append(float(f.value))
            if f.percent:
                values.append(float(f.value) * 100)
            if f.id.endswith("_ms"):
                values.append(float(f.value) / 1000)
        values += [float(t.replace(",", "")) for t in numbers_in(f.text)]
    return values


def unsupported_numbers(text: str, facts: list[Fact]) -> list[str]:
    """Numbers in `text` that no fact supports (empty when the prose is faithful)."""
    values = allowed_values(facts)
    return [t for t in numbers_in(text) if not any(_matches(t, v) for v in values)]
