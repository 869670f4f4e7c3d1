"""Predictions, simulation and manifests run one engine: the batch cap a plan renders is the batch its prediction
assumed, and the simulator that verifies the plan runs that cap."""

from __future__ import annotations

from pathlib import Path

from infra import api
from infra.bench.engine import engine_model
from infra.perf.estimate import estimate
from infra.perf.shape import Deployment, Parallel, Role
from infra.planner.candidates import MAX_NUM_SEQS, service_workload
from infra.planner.types import load_plan

from ..conftest import EXAMPLES, ROOT

GOLDEN = ROOT / "tests" / "golden"
PLANS = sorted(p for p in GOLDEN.glob("*/plan.yaml") if (EXAMPLES / f"{p.parent.name}.yaml").is_file())


def _rebuilt(plan, svc, alloc, intent: Path):
    """The allocation's deployment with no batch cap but the planner's ceiling, at the service's workload; None
    where the allocation is a device slice or spans two device types (their memory is not the pool's alone)."""
    if (alloc.share or 1.0) < 1 or alloc.decode_device is not None:
        return None
    resolved = api.load_intent(intent)
    rs = next(r for r in resolved.services if r.service.name == svc.name)
    wl = service_workload(rs.service, intent.parent)
    par = Parallel(**alloc.parallel.model_dump())
    role = Role(par, MAX_NUM_SEQS)
    # A disaggregated unit's decode workers may be laid out apart from its prefill worker.
    decode = Role(Parallel(**alloc.decode_parallel.model_dump()), MAX_NUM_SEQS) if alloc.decode_parallel else role
    engine = next(iter(alloc.engines.values()))
    dep = Deployment(svc.model, alloc.device, alloc.framework, alloc.precision, alloc.mode, agg=role,
                     prefill=role, decode=decode, memory_utilization=engine.memory_utilization,
                     kv_precision="fp8" if engine.kv_cache_dtype == "fp8" else "bf16")
    pool = next(p for p in plan.spec.cluster.pools if p.name == alloc.pool)
    return estimate(dep, wl, resolved.catalog, device_memory_gb=pool.device_memory_gb)


def _checked(path: Path) -> int:
    """Engines of the example's plan whose cap was held to its prediction's batch."""
    plan = load_plan(path)
    intent = EXAMPLES / f"{path.parent.name}.yaml"
    checked = 0
    for svc in plan.spec.services:
        if not svc.runs_llm_engine:
            continue
        for i, alloc in enumerate(svc.allocations):
            est = None
            for role, engine in alloc.engines.items():
                # The simulator that verifies the plan runs the cap the manifests give the engine.
                assert engine_model(plan, svc.name, i, role).max_num_seqs == engine.max_num_seqs
                if role == "prefill":
                    assert engine.batch_at_capacity is None
                    continue
                assert engine.batch_at_capacity is not None and engine.batch_at_capacity <= engine.max_num_seqs
                # A pipeline's LLM stage runs the stage's own workload, not one the intent states.
                est = est or (None if svc.pipeline else _rebuilt(plan, svc, alloc, intent))
                if est is None:
                    continue
                assert est.slots(role) == engine.max_num_seqs, (svc.name, i, role)
                checked += 1
    return checked


def test_the_rendered_batch_cap_is_the_batch_the_prediction_assumed():
    checked = {p.parent.name: _checked(p) for p in PLANS}
    # Slices, cross-device units and pipeline stages aside, most examples have engines to hold to it.
    assert sum(1 for n in checked.values() if n) >= 8, checked

