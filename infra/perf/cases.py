"""`infra estimate` inputs: one deployment and one workload, from flags or from a line of a JSONL file.

The same typed case serves both, so a flag and a JSON key mean the same thing and fail the same way.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError

from infra.catalog.hfids import checkpoint_precision
from infra.catalog.loader import Catalog
from infra.errors import InfraError, Location, Problem
from infra.intent.base import Strict, statistic
from infra.intent.models import MAX_CV
from infra.intent.units import Count, Duration, Fraction, Rate, parse_duration
from infra.limits import read_jsonl
from infra.perf.correction import UserCalibration
from infra.perf.estimate import (
    TRICKLE_RPS,
    Compiled,
    Estimate,
    compile_deployment,
    estimates,
    finite_ms,
    max_rate,
    missed,
    objective_value,
)
from infra.perf.shape import Deployment, Parallel, Role, Workload

_SLO_METRICS = ("ttft", "tpot", "itl", "e2e")


class RoleCase(Strict):
    """Layout of one worker role."""

    tp: int = Field(default=1, ge=1)
    """Tensor parallel size."""
    pp: int = Field(default=1, ge=1)
    """Pipeline parallel size."""
    ep: int = Field(default=1, ge=1)
    """Expert parallel size."""
    moe_tp: int | None = Field(default=None, ge=1)
    """Tensor parallel size inside the experts; unset, what the engines do: the tensor-parallel ranks that expert
    parallelism leaves (tp / ep, so tp 8 alone shards every expert 8 ways), 1 for a dense model."""
    dp: int = Field(default=1, ge=1)
    """Attention data-parallel groups."""
    batch: int | None = Field(default=None, ge=1)
    """Batch cap per attention group (max_num_seqs)."""
    workers: int | None = Field(default=None, ge=1)
    """Replicas of this role."""
    max_num_tokens: Annotated[Count, Field(ge=1)] = 8192
    """Tokens per step (chunked-prefill budget)."""

    def role(self, moe: bool) -> Role:
        moe_tp = self.moe_tp
        if moe_tp is None:
            moe_tp = self.tp // self.ep if moe and self.tp % self.ep == 0 else 1
        return Role(Parallel(self.tp, self.pp, self.ep, moe_tp, self.dp), self.batch, self.workers,
                    self.max_num_tokens)


class EstimateCase(RoleCase):
    """One deployment under one workload."""

    model: str
    """Catalog model name, Hugging Face id, or config.json path."""
    device: str
    """Catalog device name."""
    framework: str = "vllm"
    """Serving framework."""
    precision: str | None = None
    """Weight precision; defaults to the one the model reference publishes (a quantized re-upload's format, else
    the model's) when the device supports it, else bf16."""
    mode: Literal["agg", "disagg"] = "agg"
    """Aggregated, or prefill/decode disaggregated (then give prefill and decode)."""
    prefill: RoleCase | None = None
    """Prefill workers' layout (disaggregated)."""
    decode: RoleCase | None = None
    """Decode workers' layout (disaggregated)."""
    isl: Count
    """Input tokens per request (mean)."""
    osl: Count
    """Output tokens per request (mean)."""
    isl_cv: float = Field(default=0.0, ge=0, le=MAX_CV, allow_inf_nan=False)
    """Coefficient of variation of input lengths."""
    osl_cv: float = Field(default=0.0, ge=0, le=MAX_CV, allow_inf_nan=False)
    """Coefficient of variation of output lengths."""
    concurrency: int | None = Field(default=None, ge=1)
    """Closed loop: concurrent clients."""
    requests: int | None = Field(default=None, ge=1)
    """Closed loop: requests the run sends in all. Its clients start at once, so their share of the requests is a
    first wave whose prompts queue behind each other (`infra bench` measures it with the rest); without it, the
    deployment serving the load for good (`Compiled.serving`), as a plan prices it."""
    rate: Rate | None = None
    """Open loop: requests per second."""
    arrival_cv: float = Field(default=1.0, ge=0, le=MAX_CV, allow_inf_nan=False)
    """Coefficient of variation of inter-arrival times (1 = Poisson)."""
    prefix_hit: Fraction = 0.0
    """Fraction of prompt tokens found in the prefix cache."""
    memory_utilization: float = Field(default=0.9, gt=0, le=1)
    """Fraction of device memory the engine may use."""
    max_rate: bool = False
    """Report the largest rate meeting `slo` instead of metrics at a given load."""
    slo: dict[str, Duration] = {}
    """Objectives, e.g. {ttft_p99: 300ms, tpot_p99: 40ms}: the ones max_rate must meet, else checked at the load
    given."""

    @field_validator("slo")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        for key, target in value.items():  # as an intent's objectives: a target of zero is met by nothing
            if target <= 0:
                raise ValueError(f"objective {key} is {target * 1000:g}ms, and no request is that fast; give a "
                                 "time above zero")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> EstimateCase:
        if self.max_rate:
            if not self.slo:
                raise ValueError("max_rate needs objectives; e.g. slo: ttft_p99=300ms,tpot_p99=40ms")
            if self.concurrency is not None:
                raise ValueError("max_rate searches open-loop request rates, so a concurrency does not apply; drop "
                                 "concurrency, or drop max_rate to predict that closed loop")
        elif (self.concurrency is None) == (self.rate is None):
            raise ValueError("give exactly one of concurrency (closed loop) or rate (open loop)")
        if self.requests is not None and self.concurrency is None:
            raise ValueError("requests counts a closed loop's requests, whose clients start together; give "
                             "concurrency with it, or drop requests")
        for key in self.slo:
            metric, _, pct = key.partition("_")
            try:
                statistic(pct)
            except ValueError:
                metric = ""
            if metric not in _SLO_METRICS:
                raise ValueError(f"objective {key!r} is not metric_percentile or metric_mean; write e.g. ttft_p99, "
                                 "tpot_p50 or ttft_mean")
        if self.mode == "disagg" and (self.prefill is None or self.decode is None):
            raise ValueError("a disaggregated deployment needs prefill and decode layouts; add both")
        if self.mode == "agg" and (self.prefill is not None or self.decode is not None):
            raise ValueError("prefill and decode layouts describe a disaggregated deployment; set mode disagg, or "
                             "give the aggregated layout (tp, ep, dp ...) instead")
        return self

    def deployment(self, catalog: Catalog) -> Deployment:
        model = catalog.model(self.model)
        device = catalog.device(self.device)
        # A quantized re-upload (`...-FP8`, `nvidia/...-NVFP4`) publishes its weights in the format its id names.
        published = checkpoint_precision(self.model, model.hf_id) or model.native_precision
        precision = self.precision or (published if published in device.precisions else "bf16")
        # A model given as a config.json is not in the catalog under its name: later stages look it up by path.
        ref = self.model if self.model.endswith(".json") else model.name
        moe = model.moe is not None
        if self.mode == "agg":
            return Deployment(ref, device.name, self.framework, precision, "agg", agg=self.role(moe),
                              memory_utilization=self.memory_utilization)
        assert self.prefill is not None and self.decode is not None
        return Deployment(ref, device.name, self.framework, precision, "disagg",
                          prefill=self.prefill.role(moe), decode=self.decode.role(moe),
                          memory_utilization=self.memory_utilization)

    def workload(self) -> Workload:
        return Workload(isl=self.isl, osl=self.osl, concurrency=self.concurrency,
                        rate=self.rate if self.rate is not None else (1.0 if self.max_rate else None),
                        arrival_cv=self.arrival_cv, isl_cv=self.isl_cv, osl_cv=self.osl_cv,
                        prefix_hit=self.prefix_hit)

    def first_wave(self) -> float | None:
        """Share of a closed loop's requests in its clients' first wave, where `requests` is given."""
        if self.requests is None or self.concurrency is None:
            return None
        return min(1.0, self.concurrency / self.requests)

    def objectives(self) -> dict[tuple[str, str], float]:
        return {(k.partition("_")[0], k.partition("_")[2]): v for k, v in self.slo.items()}


def parse_slo(text: str) -> dict[str, str]:
    """`ttft_p99=300ms,tpot_p99=40ms` -> {"ttft_p99": "300ms", "tpot_p99": "40ms"}, each duration checked."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise InfraError(Problem(f"--slo item {part!r} has no '='", Location(path="--slo"),
                                     "write metric_percentile=duration, e.g. ttft_p99=300ms,tpot_p99=40ms"))
        try:
            parse_duration(value.strip())
            out[key.strip().lower()] = value.strip()
        except ValueError as exc:
            raise InfraError(Problem(str(exc), Location(path=f"--slo {key.strip()}"),
                                     "durations need a unit, e.g. 300ms")) from None
    return out


def case_from(data: dict[str, Any], where: Location) -> EstimateCase:
    try:
        return EstimateCase.model_validate(data)
    except PydanticValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            path = ".".join(str(p) for p in err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                # A prefill or decode layout takes only a role's fields.
                known = RoleCase if len(err["loc"]) > 1 and err["loc"][0] in ("prefill", "decode") else EstimateCase
                msg = f"unknown field; fields are {', '.join(known.model_fields)}"
            fix = None
            if "; " in msg:
                msg, fix = msg.rsplit("; ", 1)
            problems.append(Problem(msg, Location(where.file, where.line, where.column,
                                                  ".".join(filter(None, (where.path, path)))),
                                    fix or "see `infra estimate --help`"))
        raise InfraError(problems) from None


def run_case(case: EstimateCase, catalog: Catalog, calibration: UserCalibration | None = None) -> dict[str, Any]:
    """The JSON result of one case: metrics at a load, or the goodput capacity under objectives; with the user's
    `calibration`, corrected by what it says of this deployment."""
    dep = case.deployment(catalog)
    wl = case.workload()
    measured = calibration.correction(dep, wl) if calibration is not None else None
    if case.max_rate:
        rate, est = max_rate(dep, wl, case.objectives(), catalog, correction=measured)
        out: dict[str, Any] = {"max_rate_rps": round(rate, 6), "slo_ms": {k: round(v * 1000, 4)
                                                                          for k, v in sorted(case.slo.items())}}
        if rate > 0:
            out["at_max_rate"] = est.to_json()
        else:
            # Say which objectives even a trickle misses, and by what prediction, so the user knows what to relax.
            out["trickle_rps"] = TRICKLE_RPS
            out["missed_at_trickle_ms"] = {k: None if v is None else finite_ms(v)
                                           for k, v in missed(est.prediction, case.objectives()).items()}
        return out
    compiled = _as_run(case, compile_deployment(dep, catalog, correction=measured), wl)
    return _result(case, compiled.at(wl), compiled)


def _as_run(case: EstimateCase, compiled: Compiled, wl: Workload) -> Compiled:
    """The deployment as the case's load meets it: a benchmark of `requests` with its clients' first wave, else as
    it serves the load for good (`Compiled.serving`)."""
    share = case.first_wave()
    return compiled.serving(wl) if share is None else compiled.with_first_wave(share)


BUNCHED_SPREAD = 0.5
"""Share of a round over which the clients' starts have spread below which a run's later rounds still bring their
prompts in bunches."""


def _bunching(case: EstimateCase) -> str | None:
    """For a disaggregated benchmark whose lengths vary too little to dephase its clients in the rounds it runs: a
    client's start wanders by a round's relative spread each round, independently, so after k rounds the starts
    spread over about sqrt(k) x that of a round (the answer's CV, which sets most of a round). The prediction prices
    the rounds after the first wave dephased; the published P/D sweeps (6.4% over ten rounds) ran TTFT above such
    predictions as bursts do, where their aggregated sweeps did not (`benchmarks/sim_fidelity.py`)."""
    cv = case.osl_cv or case.isl_cv
    rounds = (case.requests or 0) / (case.concurrency or 1)
    if not cv or rounds < 2:
        return None
    spread = math.sqrt(rounds) * cv
    if spread >= BUNCHED_SPREAD:
        return None
    return (f"; lengths varying by {cv:.1%} over its {rounds:.3g} rounds leave the clients' starts spread over about "
            f"{spread:.0%} of a round, so its later rounds' prompts still arrive in bunches that this prediction, "
            "pricing them dephased, does not queue: expect its TTFT higher")


def _wave_note(case: EstimateCase, compiled: Compiled) -> str | None:
    """What a closed loop's TTFT takes its clients' first wave to be, which lengthens its tail."""
    if case.concurrency is None:
        return None
    run = ("--requests, or requests in a case file, prices a benchmark's run of that many, whose clients start at "
           "once")
    if case.requests is None and case.workload().dephased:
        return (f"closed loop: its steady state, the clients dephased by their varied lengths, as a deployment "
                f"serves them for good and `infra bench` judges them past their start-up; {run}")
    if case.requests is not None:
        whose = f"{case.concurrency} clients over {case.requests} requests"
        bunched = _bunching(case) if "prefill" in compiled.workers else None
        if bunched is not None:
            whose += bunched
    else:
        whose = (f"clients whose lengths all match stay in step: the share fitted to the measured such loops; {run}")
    worker = compiled.workers.get("agg") or compiled.workers["prefill"]
    return (f"closed loop: the clients start at once, and that first wave is {worker.factors.queue:.0%} of the "
            f"requests ({whose}); its prompts queue behind each other, and those that wait longer than the steady "
            "state's lengthen the TTFT tail, as long prompts and waits behind the other clients' do")


def _result(case: EstimateCase, est: Estimate, compiled: Compiled) -> dict[str, Any]:
    """The JSON result of a case predicted at its load, its objectives checked there."""
    out = est.to_json()
    note = _wave_note(case, compiled)
    if note is not None:
        out["notes"] = [*out["notes"], note]
    if case.slo:
        pred = est.prediction
        misses = missed(pred, case.objectives())
        out["slo_check"] = {
            f"{m}_{p}": {"target_ms": finite_ms(target),
                         "predicted_ms": finite_ms(objective_value(pred, m, p)) if pred.stable else None,
                         "met": f"{m}_{p}" not in misses}
            for (m, p), target in sorted(case.objectives().items())}
    return out


def run_cases(cases: list[EstimateCase], catalog: Catalog,
              calibration: UserCalibration | None = None) -> list[dict[str, Any] | InfraError]:
    """`run_case` of each case (or why it cannot run): the capacity searches one by one, the predictions at a load
    together (`infra.perf.estimate.estimates`: open loops in vector passes, the scalar model's results), each
    deployment compiled once."""
    out: list[dict[str, Any] | InfraError | None] = [None] * len(cases)
    loads: list[tuple[int, Compiled, Workload]] = []
    compiled: dict[tuple[Any, ...], Compiled] = {}
    for i, case in enumerate(cases):
        try:
            if case.max_rate:
                out[i] = run_case(case, catalog, calibration)
                continue
            dep, wl = case.deployment(catalog), case.workload()
            measured = calibration.correction(dep, wl) if calibration is not None else None
            key = (dep, measured, case.first_wave(), wl.dephased)
            if key not in compiled:
                compiled[key] = _as_run(case, compile_deployment(dep, catalog, correction=measured), wl)
            loads.append((i, compiled[key], wl))
        except InfraError as exc:
            out[i] = exc
    for (i, one, _), got in zip(loads, estimates([(one, wl) for _, one, wl in loads])):
        out[i] = got if isinstance(got, InfraError) else _result(cases[i], got, one)
    return out  # type: ignore[return-value]


def read_cases(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-empty line of a JSONL file of cases."""
    return read_jsonl(path, "cases file")


def measured_wave(case: EstimateCase, steady: bool) -> float | None:
    """The first-wave share a measured closed loop is replayed with (`infra.perf.rows.Case.wave`): where it was
    measured past its start-up (`infra.bench.run.past_start_up`), as the deployment serves the load for good
    (`Compiled.serving`: none where its lengths vary); else its clients' share of its requests where it counted
    them, and the share fitted to loops that do not say (None) where it did not."""
    if steady:
        return 0.0 if case.workload().dephased else None
    return case.first_wave()


def read_measured(path: Path) -> list[tuple[int, EstimateCase, float, float, float | None]]:
    """(line, case, measured mean TTFT ms, measured mean TPOT ms, its first-wave share `measured_wave`) for every
    `case` line of a saved benchmark run (`infra bench --save`); other lines (requests, summary) are skipped."""
    out = []
    for n, obj in read_jsonl(path, "measurements file", "give a file written by `infra bench --save`"):
        if obj.get("kind") != "case":
            continue
        where = Location(str(path), n, 1, "case")
        try:
            ttft, tpot = float(obj["ttft_ms"]), float(obj["tpot_ms"])
        except (KeyError, TypeError, ValueError):
            raise InfraError(Problem("a case line needs numeric ttft_ms and tpot_ms", where,
                                     "write it with `infra bench --save`")) from None
        if not isinstance(obj.get("case"), dict):
            raise InfraError(Problem("a case line needs a `case` object", where, "write it with `infra bench --save`"))
        case, steady = obj["case"], obj.get("steady") is True
        if case.get("concurrency") and type(obj.get("requests")) is int and obj["requests"] > 0 and not steady:
            case = {**case, "requests": obj["requests"]}  # its clients' first wave is that share of them
        est = case_from(case, where)
        out.append((n, est, ttft, tpot, measured_wave(est, steady)))
    return out
