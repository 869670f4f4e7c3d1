"""Measured deployments as the model's cases: each row read as its engines ran it, and priced by the model.

Rows follow the `silicon_calibration.csv` format (see shared/data/README.md): one deployment measured at a fixed
concurrency with fixed input/output lengths, mean TTFT and TPOT. `infra calibrate` reads a user's measurements
this way; the statistics over many rows that the packaged calibration is fitted and judged with are offline
tooling (`infra.fitting`), which the runtime never imports.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from infra.catalog.hfids import precision_named
from infra.catalog.loader import Catalog
from infra.catalog.schema import ModelSpec
from infra.errors import InfraError, Location, Problem
from infra.perf.arch import Worker, model_terms
from infra.perf.calibration import Factors, first_wave
from infra.perf.cases import read_measured
from infra.perf.estimate import build_workers, predict_all
from infra.perf.estimate import predict as serving_predict
from infra.perf.heap import collector_paused
from infra.perf.serving import Prediction
from infra.perf.shape import Deployment, Parallel, Role, Workload

REPLAY_MEMORY = 0.95
"""Benchmarked deployments run engines at their highest memory settings (SGLang sizes its static pool at 0.88-0.95
of memory, TRT-LLM's KV fraction is set on top of weights); planning keeps the safer 0.9."""

CONCURRENCY_FIELD = re.compile(r"silicon_concurrency=(\d+)")
"""Where a row's `silicon_data_source` records the clients it was measured with."""
_SWEEP = re.compile(r"source_file=\d{4}-\d{2}-\d{2}\.csv|db-dump/\d{4}-\d{2}-\d{2}")
"""Rows of the dated sweep files were measured with the `benchmark_serving` client of the InferenceMAX sweeps:
`--random-range-ratio 0.8` (each request's input and output lengths drawn uniformly from [0.8 L, L] for the
row's L) and `--num-prompts` ten times `--max-concurrency`. The same runs also come as a database dump
(`db-dump/DATE; config_id=N; ... workflow_run_id=M`): one measurement appears under both, e.g. DeepSeek-R1 on
SGLang 0.5.9, B200, fp8, tp 8, 1024/1024 at 4 clients, 183.18 ms TTFT and 8.76 ms TPOT, as
`source_file=2026-03-25.csv` and as `db-dump/2026-04-27; config_id=87`."""
SWEEP_RANGE_RATIO = 0.8
SWEEP_PROMPTS_PER_CLIENT = 10
SWEEP_RECV_INTERVAL = {"B200": (10, 30, 16)}
"""`--scheduler-recv-interval` of the sweeps' aggregated SGLang recipes by device: the B200 scripts (DeepSeek-R1,
fp8 and fp4) poll for new requests every 10 decode steps, every 30 from 16 clients on (the fp8 tensor-parallel-4
script keeps 10); the H200 scripts poll every step. Known for those scripts only (`SWEEP_RECV_FAMILIES`): another
model's sweep rows are replayed as polling every step."""
SWEEP_RECV_FAMILIES = ("deepseek-v3",)
RECIPES = Path(__file__).parent / "data" / "sweep_recipes.json"
"""The disaggregated recipes the sweeps ran (InferenceX `nvidia-master.yaml`): workers, layouts, decode batches and
speculative decoding per client count, none of which the rows record."""
WIDE_EP_DEVICES = 8
"""Devices of a disaggregated role beyond which the published recipes run data-parallel attention over
expert-parallel MoE (TRT-LLM's and SGLang's wide-EP "dep" layouts: dep16 .. dep72); up to it they run
tensor-parallel attention (tep4, tep8). The rows record neither."""


@dataclass(frozen=True)
class Case:
    """One measured row, mapped onto the model's types."""

    row: dict[str, str]
    group: str
    """`framework/device` (catalog names), the unit calibration factors are fitted per."""
    model: str
    deployment: Deployment
    workload: Workload
    ttft_ms: float
    tpot_ms: float
    recipe: bool = True
    """A row of the published measurements (their engines ran the published recipes, `as_measured`), not a run
    of this product's own engines (`infra bench --save`)."""
    wave: float | None = None
    """Share of the requests that belong to the first wave, sent by every client at once, where the measuring
    client's request count is known."""
    recv_interval: int = 1
    """Decode steps between the measured scheduler's polls for new requests (`SWEEP_RECV_INTERVAL`)."""
    speculative: bool | None = None
    """Whether the measured disaggregated recipe decoded speculatively (`RECIPES`); None when the rows do not say,
    as where a recipe with and one without ran at the same client count."""
    draft: float = 0.0
    """Draft tokens each sequence of the measured recipe's speculative decoding verifies a step (its MTP layers)."""
    alternatives: tuple[tuple[Deployment, bool | None, float], ...] = ()
    """Other recipes of other layouts that ran at the row's client count (the rows do not say which one a row
    measured): the row is predicted as the geometric mean over them and `deployment`."""
    tails: tuple[tuple[str, str, float], ...] = ()
    """Measured percentiles where the source records them: (metric `ttft` or `tpot`, percentile name of
    `serving.PERCENTILES`, milliseconds)."""
    samples: int = 0
    """Requests the percentiles were taken over."""
    range_ratio: float = 1.0
    """The measuring client drew each request's input and output lengths uniformly on [r L, L] for the row's
    recorded L (`SWEEP_RANGE_RATIO` for the sweeps); `workload` holds their means. 1: every request had L."""


SGLANG_CHUNKS = ((35, 2048), (160, 8192), (math.inf, 16384))
"""SGLang's default --chunked-prefill-size by device memory (GiB below which it applies), which the measured
engines ran with: the rows do not record it."""


def sglang_chunk(memory_gib: float) -> int:
    """The prompt tokens a measured SGLang engine took per step over all its data-parallel attention groups: with
    --enable-dp-attention it divides --chunked-prefill-size by --dp-size, so each of 72 groups on a GB200 rack
    prefilled 16384 // 72 = 227 tokens a step."""
    return next(chunk for below, chunk in SGLANG_CHUNKS if memory_gib < below)


def _int(value: str, default: int = 1) -> int:
    try:
        v = int(float(value))
    except (TypeError, ValueError):
        return default
    return v if v > 0 else default


REQUIRED_COLUMNS = ("model_path", "system", "backend", "isl", "osl", "silicon_ttft_ms", "silicon_tpot_ms")


def load_rows(path: str | Path) -> list[dict[str, str]]:
    """The rows of a CSV in the silicon_calibration.csv format; a missing file or column is an error naming it."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise InfraError(Problem(f"no column {', '.join(missing)} in the header", Location(str(path), 1, 1),
                                         "give a CSV in the silicon_calibration.csv format (shared/data/README.md)"))
            return list(reader)
    except (OSError, UnicodeDecodeError) as exc:
        raise InfraError(Problem(f"cannot read it: {exc.strerror if isinstance(exc, OSError) else exc.reason}",
                                 Location(str(path)), "give the path of a readable UTF-8 CSV")) from exc


def _precision(row: dict[str, str], native: str) -> str:
    """The weights' format: the `precision` column, else the GEMMs' quantization mode, else the model's own; the
    spellings of the frameworks and quantization tools (bfloat16, nvfp4, fp8_block, w4a16 ...) mapped to ours."""
    for column in ("precision", "gemm_quant_mode"):
        value = precision_named(row.get(column) or "")
        if value:
            return value
    return native


def _unrecorded_layout(dep: Deployment, catalog: Catalog, moe: bool, heads: int, domain: int) -> Deployment:
    """Some published rows record every degree as 1 for a model no single device holds: the layout was not
    recorded, but the deployment ran. Such roles are replayed on the smallest layout whose weights fit, in powers
    of two within the scale-up domain: experts spread over the devices with attention data parallelism for MoE
    models (how wide-EP recipes run them), tensor parallelism for dense ones."""
    single = [name for name, r in dep.roles().items() if r.parallel.devices == 1]
    if not single:
        return dep
    try:
        build_workers(dep, catalog)
        return dep
    except InfraError as exc:
        if "does not fit" not in exc.problems[0].message:
            return dep
    n = 2
    while n <= domain:
        par = Parallel(attention_dp=n, ep=n) if moe else Parallel(tp=n)
        if moe or heads % n == 0:
            wider = replace(dep, **{name: replace(getattr(dep, name), parallel=par) for name in single})
            try:
                build_workers(wider, catalog)
                return wider
            except InfraError:
                pass
        n *= 2
    return dep


@functools.cache
def _recipes() -> dict[tuple[str, str, str, str, int, int], list[dict[str, Any]]]:
    """The recipes by model, framework, device, precision and lengths."""
    index: dict[tuple[str, str, str, str, int, int], list[dict[str, Any]]] = {}
    for r in json.loads(RECIPES.read_text())["recipes"]:
        index.setdefault((r["model"], r["framework"], r["device"], r["precision"], r["isl"], r["osl"]), []).append(r)
    return index


def recipe_models(model: ModelSpec, catalog: Catalog) -> tuple[str, ...]:
    """The models whose recipes a row of `model` may have run: itself and the catalog models of its exact
    architecture (the sweeps' DeepSeek-R1 recipes, for rows that name the checkpoint DeepSeek-V3)."""
    names = {r["model"] for recipes in _recipes().values() for r in recipes}
    out = [model.name]
    for name in sorted(names - {model.name}):
        other = catalog.models.get(name)
        if (other is not None and other.native_precision == model.native_precision
                and model_terms(other) == model_terms(model)):
            out.append(name)
    return tuple(out)


def _recipe_role(spec: dict[str, Any], dense: bool) -> Role:
    """A recipe's role as the engines lay it out: `tp` devices, the experts over `ep` of them and tensor-parallel
    over the rest, attention data-parallel over all of them or tensor-parallel."""
    tp, ep = spec["tp"], 1 if dense else spec["ep"]
    moe_tp = 1 if dense else max(1, tp // ep)
    par = (Parallel(tp=1, attention_dp=tp, ep=ep, moe_tp=moe_tp) if spec["dp_attention"]
           else Parallel(tp=tp, ep=ep, moe_tp=moe_tp))
    return Role(parallel=par, batch_cap=spec.get("batch"), workers=spec["workers"],
                max_num_tokens=spec.get("max_num_tokens", Role.max_num_tokens))


def _recorded(row: dict[str, str], role: str, recipe: dict[str, Any]) -> bool:
    """Whether what a row records of one role (its workers; its devices per worker, tp x attention-DP ranks, where
    above 1) agrees with a recipe's."""
    workers = _int(row.get(f"{role}_num_workers", ""), 0)
    devices = _int(row.get(f"{role}_tp_size", "")) * _int(row.get(f"{role}_attention_dp_size", ""))
    return workers in (0, recipe[role]["workers"]) and devices in (1, recipe[role]["tp"])


def sweep_recipes(row: dict[str, str], models: tuple[str, ...], framework: str, device: str, precision: str,
                  clients: int, dense: bool) -> list[tuple[Role, Role, bool | None, float]]:
    """(prefill, decode, speculative, draft tokens) of each layout of the recipes of `models` (the row's model and
    its architecture twins) that ran at a disaggregated sweep row's client count, speculative None where one with
    and one without ran on that layout. What the row records of each role (workers, devices) must match."""
    try:
        lengths = (int(float(row["isl"])), int(float(row["osl"])))
    except (KeyError, ValueError):
        return []

    candidates = [r for model in models for r in _recipes().get((model, framework, device, precision, *lengths), [])
                  if all(_recorded(row, role, r) for role in ("prefill", "decode"))]
    found = [r for r in candidates if clients in r["concurrency"]]
    if not found:
        # Some sweeps list the clients per decode worker (the H200 ones: 36 clients for 4 on each of 9 workers).
        found = [r for r in candidates if clients in (c * r["decode"]["workers"] for c in r["concurrency"])]
    layouts: dict[str, list[dict[str, Any]]] = {}
    for r in found:
        layouts.setdefault(json.dumps([r["prefill"], r["decode"]], sort_keys=True), []).append(r)
    out = []
    for same in layouts.values():
        speculative = {r["speculative"] for r in same}
        out.append((_recipe_role(same[0]["prefill"], dense), _recipe_role(same[0]["decode"], dense),
                    speculative.pop() if len(speculative) == 1 else None,
                    max(r["decode"].get("draft_tokens", 0) for r in same)))
    return out


def to_case(row: dict[str, str], catalog: Catalog) -> Case | str:
    """The case for a row, or why it cannot be replayed."""
    try:
        model = catalog.model(row["model_path"])
        device = catalog.device(row["system"])
        framework = catalog.framework(row["backend"])
    except InfraError as exc:
        return str(exc.problems[0].message)
    m = CONCURRENCY_FIELD.search(row.get("silicon_data_source", ""))
    # The sweeps run as many clients as the batches hold: every aggregated row of the calibration set has clients =
    # batch_size x attention-DP ranks, and a disaggregated row that records its decode batch and workers holds its
    # clients in them. That stands in when a row does not record its clients.
    held = "decode_" if row.get("mode") == "disagg" else ""
    batches = (_int(row.get(f"{held}batch_size", ""), 0) * _int(row.get(f"{held}attention_dp_size", ""))
               * _int(row.get(f"{held}num_workers", "")))
    if not m and not batches:
        return "no silicon_concurrency in silicon_data_source and no batch size to stand in"
    try:
        ttft, tpot = float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
        isl, osl = float(row["isl"]), float(row["osl"])
    except (KeyError, ValueError):
        return "missing isl/osl/ttft/tpot"
    if ttft <= 0 or tpot <= 0:
        return "non-positive measurement"
    clients = int(m.group(1)) if m else batches
    precision = _precision(row, model.native_precision)
    dense = model.moe is None
    domain = int(device.interconnect.domain_size.value)

    def parallel(prefix: str) -> tuple[Parallel, int]:
        """The role's layout, and how many recorded attention-DP ranks make one rank of it."""
        tp = _int(row.get(f"{prefix}tp_size", ""))
        dp = _int(row.get(f"{prefix}attention_dp_size", ""))
        ep = 1 if dense else _int(row.get(f"{prefix}moe_ep_size", ""))
        moe_tp = 1 if dense else _int(row.get(f"{prefix}moe_tp_size", ""))
        folded = 1
        if moe_tp > 1 and ep > 1 and tp * dp == moe_tp * ep:
            if not prefix and tp * dp > domain:
                # Single-node sweeps record an n-device layout with experts over ep of them as moe_tp n x ep,
                # and the attention degree as that product: tp 64 = moe_tp 8 x ep 8 for tp 8 / ep 8 on an 8-GPU
                # node (the rows' ids say tp8_ep8), attention-DP 64 for 8 data-parallel ranks.
                n = moe_tp
                folded = dp // n if dp > 1 else 1
                tp, dp = (n, 1) if tp > 1 else (1, n)
                moe_tp = max(1, n // ep)
            elif prefix:
                # Disaggregated rows record a role's device count as tp and split it as moe_tp x ep with the
                # prefill workers' ep (decode tp 32 = moe_tp 8 x ep 4 behind an ep-4 prefill): the recipes spread
                # the experts over every device of the role. Wider than WIDE_EP_DEVICES they run data-parallel
                # attention (their "dep" layouts); up to it, tensor-parallel attention ("tep").
                n = tp * dp
                ep, moe_tp = n, 1
                if n > WIDE_EP_DEVICES:
                    tp, dp = 1, n
        if (model.moe is not None and not _int(row.get(f"{prefix}moe_tp_size", ""), 0)
                and not _int(row.get(f"{prefix}moe_ep_size", ""), 0)):
            # No expert degrees recorded (vLLM rows write 0): the engine shards the experts over every device of the
            # role, by tensor parallelism alone or as expert parallelism across its data-parallel ranks.
            ep, moe_tp = (tp * dp, 1) if dp > 1 else (1, tp)
        if model.moe is not None and not prefix and dp == 1 and ep == 1 and moe_tp == tp > WIDE_EP_DEVICES:
            # An aggregated MoE layout recorded as tensor parallelism over more than a node's worth of devices
            # (tp 32 and tp 64 on NVL72 racks, beside the tp 36 and tp 48 of the same sweeps) ran as the wide-EP
            # recipes do: data-parallel attention with the experts spread over every device.
            tp, dp, ep, moe_tp = 1, tp, tp, 1
        if model.moe is not None and model.attention_heads % tp:
            # Wide deployments (tp 12..72 on NVL72 racks) record the device count as tp; for a MoE model a tp that
            # does not divide the heads can only run as data-parallel attention with the experts spread over the
            # same devices.
            tp, dp = 1, tp * dp
        if model.moe is not None and model.moe.expert_ffn_size % moe_tp:
            ep, moe_tp = ep * moe_tp, 1
        if (model.moe is not None and not row.get(f"{prefix}attention_dp_size") and moe_tp * ep > tp * dp
                and moe_tp * ep % tp == 0):
            # Experts over more devices than attention with no attention-DP degree recorded (vLLM rows: tp 1 with
            # moe_tp 2): the engine ran data-parallel attention over the expert devices, as vLLM does when it
            # shards the experts of its DP x TP ranks as one tensor-parallel group.
            dp = moe_tp * ep // tp
        return Parallel(tp=tp, pp=_int(row.get(f"{prefix}pp_size", "")), ep=ep, moe_tp=moe_tp, attention_dp=dp), folded

    def role(prefix: str) -> Role:
        batch = row.get(f"{prefix}batch_size", "")
        workers = row.get(f"{prefix}num_workers", "")
        par, folded = parallel(prefix)
        cap = _int(batch) * folded if batch else None
        if (prefix == "" and model.moe is not None and cap and par.attention_dp == 1 and par.tp > 1
                and cap < clients <= cap * par.tp and clients % cap == 0):
            # More clients than the batch holds, in whole batches of the tp ranks: TRT-LLM's attention data
            # parallelism (enable_attention_dp), where tp_size counts the ranks and each runs its own batch.
            par = replace(par, tp=1, attention_dp=par.tp)
        elif (prefix == "" and model.moe is None and not workers and cap and par.attention_dp == 1
              and clients > cap and clients % cap == 0):
            # A dense model's clients in whole batches: that many replicas, each running its own batch.
            workers = str(clients // cap)
        return Role(parallel=par, batch_cap=cap, workers=_int(workers) if workers else None)

    recipes: list[tuple[Deployment, bool | None, float]] = []
    if row.get("mode") == "disagg" and _SWEEP.search(row.get("silicon_data_source", "")):
        # Rows that record their workers still leave out whether the decode workers ran MTP (and, in the database
        # export, their data-parallel attention): the recipe that ran that layout at those clients says.
        found = sweep_recipes(row, recipe_models(model, catalog), framework.name, device.name, precision, clients,
                              dense)
        recipes = [(Deployment(model.name, device.name, framework.name, precision, "disagg", prefill=p, decode=d,
                               memory_utilization=REPLAY_MEMORY), speculative, draft)
                   for p, d, speculative, draft in found]
    if recipes:
        dep = recipes[0][0]
    elif row.get("mode") == "disagg":
        dep = Deployment(model.name, device.name, framework.name, precision, "disagg",
                         prefill=role("prefill_"), decode=role("decode_"), memory_utilization=REPLAY_MEMORY)
    else:
        dep = Deployment(model.name, device.name, framework.name, precision, "agg", agg=role(""),
                         memory_utilization=REPLAY_MEMORY)
    dep = _unrecorded_layout(dep, catalog, model.moe is not None, model.attention_heads, domain)
    if framework.name == "sglang" and dep.mode == "agg" and dep.agg.parallel.attention_dp > 1:
        dep = replace(dep, agg=replace(dep.agg, max_num_tokens=sglang_chunk(device.memory_gb.value)
                                       // dep.agg.parallel.attention_dp))
    wave, ratio = None, 1.0
    if _SWEEP.search(row.get("silicon_data_source", "")):
        # Uniform lengths on [r L, L]: the mean is (1 + r) / 2 of L, with a coefficient of variation of
        # (1 - r) / (1 + r) / sqrt(3) (6.4% at r = 0.8) that is left out. Given it, the rows run the dephased
        # closed loop (`Workload.dephased`): disaggregated TTFT 27.1% median error against 30.8% on the packaged
        # factors, but refitted on it they hold out worse (leave-one-model-out TTFT 30.6% -> 31.8%, p90 83.7% ->
        # 89.2%; Llama-3.1-8B held out 54% -> 63%): ten rounds of lengths that vary this little leave the clients
        # bunched (a client's start wanders by sqrt(10) x 6.4% of a round), and the published P/D recipes' TTFT
        # grows with the clients as the burst form prices it (`benchmarks/sim_fidelity.py`).
        isl, osl = isl * (1 + SWEEP_RANGE_RATIO) / 2, osl * (1 + SWEEP_RANGE_RATIO) / 2
        wave, ratio = 1 / SWEEP_PROMPTS_PER_CLIENT, SWEEP_RANGE_RATIO
    recv = 1
    if (wave is not None and framework.name == "sglang" and dep.mode == "agg" and device.name in SWEEP_RECV_INTERVAL
            and model.family in SWEEP_RECV_FAMILIES):
        low, high, relaxed_from = SWEEP_RECV_INTERVAL[device.name]
        tp4_fp8 = precision == "fp8" and dep.agg.parallel.tp == 4
        recv = high if clients >= relaxed_from and not tp4_fp8 else low
    return Case(row, f"{framework.name}/{device.name}", model.name, dep,
                Workload(isl=isl, osl=osl, concurrency=clients), ttft, tpot, wave=wave, recv_interval=recv,
                speculative=recipes[0][1] if recipes else None, draft=recipes[0][2] if recipes else 0.0,
                alternatives=tuple(recipes[1:]), range_ratio=ratio)


def measured_cases(path: str | Path, catalog: Catalog) -> list[Case]:
    """The cases of a saved benchmark run (`infra bench --save`), each with its measured mean TTFT and TPOT."""

    out = []
    for n, case, ttft, tpot, wave in read_measured(Path(path)):
        dep = case.deployment(catalog)
        out.append(Case({"source": f"{path}:{n}"}, f"{dep.framework}/{dep.device}", dep.model, dep, case.workload(),
                        ttft, tpot, recipe=False, wave=wave))
    return out


def as_measured(case: Case, role: str, factors: Factors) -> Factors:
    """The factors a measured worker ran with: disaggregated decode workers of the published recipes step at
    `recipe_decode` of the model's pace and, where they decode speculatively, emit `recipe_accept` tokens a step
    (`Case.speculative`, verifying `Case.draft` tokens), their TRT-LLM engines with
    attention data parallelism balance prompts across the ranks (`recipe_balance_steps`), SGLang engines that poll
    for requests every few steps leave them unseen meanwhile (`recipe_poll` of `Case.recv_interval`), and a client
    whose request count is known puts its own share of them in the first wave (`Case.wave` as `queue`)."""
    if not case.recipe:
        # A user's own closed loop whose request count is known (`infra bench`): its clients start together, and
        # that share of its requests is the first wave.
        return first_wave(factors, role, case.wave)
    if role not in ("agg", "decode"):
        return factors
    return _as_measured(factors, role, case.deployment.framework, case.wave, case.recv_interval, case.speculative,
                        case.draft)


@functools.lru_cache(maxsize=4096)
def _as_measured(factors: Factors, role: str, framework: str, wave: float | None, recv_interval: int,
                 speculative: bool | None, draft: float) -> Factors:
    """`as_measured` from what it reads of the case: a fit asks it for every row at every evaluation, with one
    set of factors and few distinct recipes."""
    if role == "decode":
        # A row whose recipe is not known to be either is taken halfway between the two (in log space).
        share = 0.0 if speculative is False else 1.0 if speculative else 0.5
        return replace(factors, accept=factors.accept * factors.recipe_decode * factors.recipe_accept ** share,
                       draft_tokens=factors.draft_tokens + draft * share)
    changes: dict[str, float] = {}
    if wave is not None:
        changes["queue"] = wave
    if framework == "trtllm" and factors.recipe_balance_steps:
        changes["balance_steps"] = factors.recipe_balance_steps
    if recv_interval > 1:
        changes["poll_steps"] = factors.recipe_poll * recv_interval
    return replace(factors, **changes) if changes else factors


def with_spread(case: Case) -> Case:
    """The case with its lengths' coefficient of variation, (1 - r) / (1 + r) / sqrt(3) for lengths uniform on
    [r L, L] (`Case.range_ratio`): how a plan prices a closed loop whose lengths vary (`Workload.dephased`), where
    the fit replays the row at its mean lengths alone."""
    r = case.range_ratio
    cv = (1 - r) / (1 + r) / math.sqrt(3)
    return replace(case, workload=replace(case.workload, isl_cv=cv, osl_cv=cv)) if cv > 0 else case


def variants(case: Case) -> list[Case]:
    """The case as each recipe it may have run (`Case.alternatives`), itself first."""
    return [case] + [replace(case, deployment=d, speculative=s, draft=k, alternatives=())
                     for d, s, k in case.alternatives]


def geomean(values: list[tuple[float, float]]) -> tuple[float, float]:
    # (`statistics.fmean`'s own sum and division, without its generator machinery: a fit takes it per row)
    n = len(values)
    return (math.exp(math.fsum([math.log(t) for t, _ in values]) / n),
            math.exp(math.fsum([math.log(p) for _, p in values]) / n))


def predict(case: Case, catalog: Catalog, factors: Factors | None = None) -> tuple[float, float] | str:
    """(TTFT ms, TPOT ms) predicted for a case, or why not."""
    got = []
    for one in variants(case):
        try:
            workers, _, link = build_workers(one.deployment, catalog, factors=factors)
            ws = {k: w.with_factors(as_measured(one, k, w.factors)) for k, w in workers.items()}
            p = serving_predict(one.deployment, one.workload, ws, link)
        except InfraError as exc:
            return exc.problems[0].message
        if not p.stable:
            return "prediction unstable: " + "; ".join(p.assumptions)
        got.append((p.ttft["mean"] * 1000, p.tpot["mean"] * 1000))
    return geomean(got)


class Replay:
    """A measured case's deployments (each recipe it may have run) compiled once, to be predicted with other
    factors as often as a fit asks: `run(factors)` is (TTFT ms, TPOT ms), `full(factors)` the predictions whole
    (percentiles included), and `replay` runs many cases at once."""

    def __init__(self, built: list[tuple[Case, dict[str, Worker], float]]) -> None:
        self.built = built

    def __call__(self, factors: Factors) -> tuple[float, float]:
        return _summary(self.full(factors))

    def full(self, factors: Factors) -> list[Prediction]:
        return [serving_predict(one.deployment, one.workload, workers, link)
                for one, workers, link in self.rebound(factors)]

    def rebound(self, factors: Factors, seen: dict[tuple[int, int], tuple[Factors, Worker]] | None = None
                ) -> list[tuple[Case, dict[str, Worker], float]]:
        """Each deployment with its workers under `factors`, as the measured engine ran them (`as_measured`).
        `seen` keeps the workers rebound so far by (worker, factors), for cases that share a compiled worker
        (`compiled`'s `shared`): rebinding takes a worker's step apart again, most of a fit's time otherwise."""
        if seen is None:
            seen = {}
        out = []
        for one, workers, link in self.built:
            ws = {}
            for k, w in workers.items():
                f = as_measured(one, k, factors)
                # Keyed by identity, with the factors kept alive by the entry so that no other takes their id.
                got = seen.get((id(w), id(f)))
                if got is None:
                    got = seen[id(w), id(f)] = f, w.with_factors(f)
                ws[k] = got[1]
            out.append((one, ws, link))
        return out


def _summary(preds: list[Prediction]) -> tuple[float, float]:
    """(TTFT ms, TPOT ms) of a case from the predictions of each recipe it may have run: their geometric mean, inf
    where any is unstable."""
    got = []
    for p in preds:
        if not p.stable:
            return float("inf"), float("inf")
        got.append((p.ttft["mean"] * 1000, p.tpot["mean"] * 1000))
    return geomean(got)


def compiled(case: Case, catalog: Catalog, shared: dict[Deployment, tuple[dict[str, Worker], float]] | None = None
             ) -> Replay | str:
    """A fast predictor for refitting, or why the case cannot be predicted: the workers are compiled once and only
    their factors change. `shared` keeps the workers compiled for each deployment, for the cases of a sweep (one
    deployment at many loads) to share them, and `replay` to rebind them once for all of those cases."""
    built = []
    for one in variants(case):
        try:
            got = shared.get(one.deployment) if shared is not None else None
            if got is None:
                workers, _, link = build_workers(one.deployment, catalog, factors=Factors())
                if shared is not None:
                    shared[one.deployment] = workers, link
            else:
                workers, link = got
            serving_predict(one.deployment, one.workload, workers, link)
        except InfraError as exc:
            return exc.problems[0].message
        built.append((one, workers, link))
    return Replay(built)


def replay(runs: Sequence[Replay], factors: Sequence[Factors]) -> list[tuple[float, float]]:
    """`[run(f) for run, f in zip(runs, factors)]`, with the rows' loads predicted together in vector passes
    (`infra.perf.estimate.predict_all`: the scalar predictions to the last bit)."""
    with collector_paused():  # thousands of workers alive at once, none in a cycle (`infra.perf.heap`)
        return _replay(runs, factors)


def _replay(runs: Sequence[Replay], factors: Sequence[Factors]) -> list[tuple[float, float]]:
    seen: dict[tuple[int, int], tuple[Factors, Worker]] = {}
    rebound = [run.rebound(f, seen) for run, f in zip(runs, factors)]
    got = iter(predict_all([(one.deployment, one.workload, workers, link)
                            for parts in rebound for one, workers, link in parts]))
    preds = [[_raised(next(got)) for _ in parts] for parts in rebound]
    return [_summary(p) for p in preds]


def _raised(pred: Prediction | InfraError) -> Prediction:
    """A prediction, or its error raised as predicting the row alone raises it."""
    if isinstance(pred, InfraError):
        raise pred
    return pred
