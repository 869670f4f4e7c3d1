"""Plan consistency: the manifests carry exactly what the plan decided.

Objects are matched to allocations by the names and labels of MANIFESTS.md (`<service>-a<i>[-prefill|-decode]`,
`infra.dev/service`, `infra.dev/allocation`, `infra.dev/role`). For each allocation and role: the workload exists
(a Deployment, or a LeaderWorkerSet when a worker spans nodes, or a DisaggregatedSet role), its replicas and group
size match, its pods request the pool's devices as the plan sizes them and select the pool's nodes, and the engine
arguments read back with the framework's catalog `cli` equal the plan's settings and layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.catalog.kinds import kind_of
from infra.catalog.loader import Catalog
from infra.catalog.schema import BYTES_PER_PARAM, DeviceSpec, EngineCli, FrameworkSpec
from infra.errors import CatalogError, InfraError
from infra.intent.yamlio import load_yaml, read_text
from infra.planner.types import Allocation, DeploymentPlan
from infra.validators.alerts import check_objective_alerts
from infra.validators.cluster import PoolView, from_plan
from infra.validators.engine_args import engine_args, file_settings, parse, tokens
from infra.validators.findings import Finding
from infra.validators.manifests import Manifest
from infra.validators.pipeline import check_pipelines
from infra.validators.pods import PodTemplate, pod_templates
from infra.validators.quantity import parse_quantity
from infra.validators.routing import check_routing
from infra.validators.rules import rule
from infra.validators.semantic import config_maps, devices_of, is_extended


@dataclass
class Expected:
    """One role of one allocation, as the plan wants it deployed."""

    service: str
    alloc_id: str
    index: tuple[int, int]
    role: str
    name: str
    allocation: Allocation
    replicas: int


def _expected(plan: DeploymentPlan) -> list[Expected]:
    out = []
    per_node = {p.name: p.devices_per_node for p in plan.spec.cluster.pools}
    for si, svc in enumerate(plan.spec.services):
        for ai, a in enumerate(svc.allocations):
            aid = f"a{ai}"
            base = f"{svc.name}-{aid}"
            if a.mode == "agg":
                out.append(Expected(svc.name, aid, (si, ai), "agg", base, a, a.replicas))
            else:
                for role, workers in (("prefill", a.prefill_workers), ("decode", a.decode_workers)):
                    view = a.role_view(role, per_node.get(a.decode_pool or a.pool, 1))
                    out.append(Expected(svc.name, aid, (si, ai), role, f"{base}-{role}", view,
                                        a.replicas * int(workers or 1)))
    return out


class _PlanFile:
    """Locations in the plan file, for findings about something missing from the manifests: the file is read
    again (with its source map) only when such a finding needs a line, which a tree that matches never does."""

    def __init__(self, path: str):
        self.path = path
        self._read = False
        self.data: Any = None
        self.smap: Any = None

    def line(self, path: tuple) -> int:
        if not self._read:
            self._read = True
            try:
                self.data, self.smap = load_yaml(read_text(Path(self.path), "plan"), self.path)
            except InfraError:  # the plan already loaded once; a second read failing only loses line numbers
                pass
        if self.smap is None:
            return 1
        return self.smap.locate(path, self.data).line or 1


def _workload_for(e: Expected, manifests: list[Manifest]) -> tuple[Manifest, list[PodTemplate], Any] | None:
    """The object (and its pod templates, and where its replicas live) that deploys one expected role."""
    for m in manifests:
        if kind_of(m.kind, m.api_version).per_role and m.name == e.name:
            return m, pod_templates(m), ("spec", "replicas")
    for m in manifests:
        if m.kind == "DisaggregatedSet" and m.labels.get("infra.dev/allocation") == e.alloc_id and \
                m.labels.get("infra.dev/service") == e.service:
            roles = m.data.get("spec", {}).get("roles") or []
            for i, r in enumerate(roles):
                if isinstance(r, dict) and r.get("name") == e.role:
                    templates = [t for t in pod_templates(m) if t.role.split("/")[0] == e.role]
                    inner = ("spec",) if isinstance(r.get("spec"), dict) else ()
                    return m, templates, ("spec", "roles", i) + inner + ("replicas",)
    return None


def _get(data: Any, path: tuple) -> Any:
    for step in path:
        if isinstance(data, dict):
            data = data.get(step)
        elif isinstance(data, list) and isinstance(step, int) and step < len(data):
            data = data[step]
        else:
            return None
    return data


def _spell(cli: EngineCli, setting: str, value: Any) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = f"{value:g}"
    else:
        text = str(value)
    return cli.values.get(setting, {}).get(text, text)  # type: ignore[call-overload]


def _plan_settings(e: Expected, cli: EngineCli) -> dict[str, Any]:
    p = e.allocation.parallel
    engine = e.allocation.engines.get(e.role)
    if engine is None:
        # A stage engine (encoder, codec, DiT) is sized by its layout alone: TP and the sequence-parallel degree.
        return {"tensor_parallel": p.tp if p.tp > 1 else None, "ulysses_degree": p.sp if p.sp > 1 else None}
    want: dict[str, Any] = {
        "served_model_name": e.service, "tensor_parallel": cli.tensor_parallel(p.tp, p.attention_dp),
        "pipeline_parallel": p.pp,
        "data_parallel": p.attention_dp if p.attention_dp > 1 else None, "attention_dp": p.attention_dp > 1,
        "expert_parallel": (True if "expert_parallel" in cli.switches else p.ep) if p.ep > 1 else None,
        "max_num_seqs": cli.given("max_num_seqs", engine.max_num_seqs, p.attention_dp),
        "max_num_batched_tokens": cli.given("max_num_batched_tokens", engine.max_num_batched_tokens, p.attention_dp),
        "max_model_len": engine.max_model_len, "memory_utilization": engine.memory_utilization,
        "kv_cache_dtype": engine.kv_cache_dtype,
        "chunked_prefill": engine.chunked_prefill, "prefix_caching": engine.prefix_caching,
    }
    # Online quantization is passed only where the engine can quantize on load; otherwise the model argument
    # must name a quantized checkpoint, which the plan does not know.
    if engine.quantization and engine.quantization in cli.values.get("quantization", {}):
        want["quantization"] = engine.quantization
    return want


def _compare_args(m: Manifest, path: tuple, container: dict[str, Any], t: PodTemplate, e: Expected,
                  fw: FrameworkSpec, model_id: str | None, manifests: list[Manifest]) -> list[Finding]:
    cli = fw.cli
    assert cli is not None
    args = parse(tokens(container), fw)
    if args is None:
        return [m.finding("PLN004", path + ("command",), f"container does not run {fw.name} "
                                                         f"({' '.join(cli.command)})",
                          fix=f"launch the engine with `{' '.join(cli.command)}`")]
    out = []
    in_file: dict[str, Any] | None = None
    if cli.config_file is not None:
        values, why = file_settings(t.spec, cli, config_maps(manifests))
        if values is None:
            out.append(m.finding("PLN004", t.spec_path + ("volumes",), f"{fw.name} reads its settings from "
                                                                       f"{cli.config_file.path}, but {why}",
                                 fix="ship the file in a ConfigMap mounted into the pod (`infra render` does)"))
        in_file = None if values is None else {k: v for k, v in values.items() if k in cli.config_file.keys}
    negations = cli.negations
    for setting, value in _plan_settings(e, cli).items():
        if cli.config_file is not None and setting in cli.config_file.keys:
            if value is None or in_file is None:  # unset in the plan, or the file is missing (reported above)
                continue
            got_file = in_file.get(setting)
            want = value if isinstance(value, bool) else _spell(cli, setting, value)
            where = f"{setting} ({cli.config_file.keys[setting]} in {cli.config_file.path.rsplit('/', 1)[-1]})"
            if got_file is None:
                out.append(m.finding("PLN004", t.spec_path + ("volumes",), f"{where} is missing (plan: {want})"))
            elif not _same(_text(got_file), _text(want)):
                out.append(m.finding("PLN004", t.spec_path + ("volumes",), f"{where} is {_text(got_file)}, "
                                                                           f"the plan says {_text(want)}"))
            continue
        if setting not in cli.flags and setting not in negations:
            continue
        got = args.settings.get(setting)
        flag = cli.flags.get(setting)
        if setting in cli.switches:
            if value is None:
                continue
            if value and got is not True and flag:
                out.append(m.finding("PLN004", path + ("args",), f"{flag} is missing ({setting} is on in the plan)",
                                     fix=f"add {flag}"))
            elif value and got is False:
                out.append(m.finding("PLN004", path + ("args",), f"{negations[setting]} is given but the plan has "
                                                                 f"{setting} on", fix=f"remove {negations[setting]}"))
            elif not value and got is True:
                out.append(m.finding("PLN004", path + ("args",), f"{flag} is given but the plan has {setting} off",
                                     fix=f"remove {flag}"))
            elif not value and setting in negations and got is not False:
                out.append(m.finding("PLN004", path + ("args",), f"{negations[setting]} is missing ({setting} is "
                                                                 "off in the plan)", fix=f"add {negations[setting]}"))
            continue
        if value is None:
            if got is not None:
                out.append(m.finding("PLN004", path + ("args",), f"{flag} {got} is given, but the plan sets no "
                                                                 f"{setting}", fix=f"remove {flag}"))
            continue
        want = _spell(cli, setting, value)
        if got is None:
            out.append(m.finding("PLN004", path + ("args",), f"{flag} is missing (plan: {want})",
                                 fix=f"add {flag} {want}"))
        elif not _same(str(got), want):
            out.append(m.finding("PLN004", path + ("args",), f"{flag} is {got}, the plan says {want}",
                                 fix=f"set {flag} {want}"))
    model = in_file["model"] if in_file and "model" in in_file else args.model
    if model_id and model is not None and not (str(model) == model_id or str(model).endswith("/" + model_id)):
        out.append(m.finding("PLN004", path + ("args",), f"model is {model}, the plan serves {model_id}",
                             fix=f"pass {model_id}"))
    return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _same(got: str, want: str) -> bool:
    if got == want:
        return True
    try:
        return float(got) == float(want)
    except ValueError:
        return False


def _compare_devices(m: Manifest, t: PodTemplate, e: Expected, pool: PoolView | None,
                     manifests: list[Manifest]) -> list[Finding]:

    a = e.allocation
    per_pod = a.devices_per_worker // max(1, a.nodes_per_worker)
    if pool is None:
        return []
    share = a.share if a.share is not None and a.share < 1 else None
    engine = next(((p, c) for p, c in t.containers(init=False) if c.get("name") == "engine"), None) or \
        next(iter(t.containers(init=False)), None)
    if engine is None:
        return []
    path, c = engine
    res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
    limits = res.get("limits") if isinstance(res.get("limits"), dict) else {}
    if t.spec.get("resourceClaims") and not any(n in limits for n in (pool.count, pool.shared_count) if n):
        got = devices_of(t, _AnyCount(), manifests)
        if got != per_pod:
            return [m.finding("PLN005", t.spec_path + ("resourceClaims",),
                              f"the pod's resource claims ask for {got} device(s), the plan gives {per_pod} per pod")]
        return []
    want: dict[str, int] = {}
    if share is None:
        want[pool.count] = per_pod
    else:
        want[pool.shared_count or pool.count] = per_pod
        if pool.memory and pool.memory_unit:
            want[pool.memory] = round(share * pool.device_memory_bytes / pool.memory_unit)
        if pool.cores:
            want[pool.cores] = round(share * 100)
    out = []
    for name, value in want.items():
        got = parse_quantity(limits.get(name))
        if got is None or got != value:
            out.append(m.finding("PLN005", path + ("resources", "limits", name) if name in limits
                                 else path + ("resources", "limits"),
                                 f"{name}: {limits.get(name, 'missing')}, the plan gives {value} per pod "
                                 f"(pool {pool.name}{f', share {share:g}' if share else ''})",
                                 fix=f"set resources.limits.{name}: {value} (and requests equal)"))
    return out


def _engine_container(t: PodTemplate) -> tuple[tuple, dict[str, Any]] | None:
    return next(((p, c) for p, c in t.containers(init=False) if c.get("name") == "engine"), None) or \
        next(iter(t.containers(init=False)), None)


def _compare_cpu(m: Manifest, t: PodTemplate, e: Expected, pool: PoolView, device: DeviceSpec, fw: FrameworkSpec,
                 model_ref: str | None, catalog: Catalog) -> list[Finding]:
    """PLN009 for a pod on CPU devices (one socket each): no device resources, cores and memory within its sockets
    with requests equal to limits, and the framework's CPU environment with a KV cache the pod's memory holds."""

    assert device.cpu is not None
    a = e.allocation
    share = a.share if a.share is not None and a.share < 1 else None
    sockets = a.devices_per_worker // max(1, a.nodes_per_worker) * (share or 1.0)
    what = f"pool {pool.name} holds CPU devices ({device.name}, requested as cores and memory)"
    out = []
    for path, c in t.containers():
        res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
        for section in ("limits", "requests"):
            table = res.get(section) if isinstance(res.get(section), dict) else {}
            devices = sorted(str(k) for k in table if is_extended(str(k)))
            if devices:
                out.append(m.finding("PLN009", path + ("resources", section, devices[0]),
                                     f"{what}, but the pod asks for {', '.join(devices)}",
                                     fix=f"remove {', '.join(devices)}; request cpu and memory of "
                                         f"{sockets:g} socket(s)"))
    found = _engine_container(t)
    if found is None:
        return out
    path, c = found
    res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
    limits = res.get("limits") if isinstance(res.get("limits"), dict) else {}
    requests = res.get("requests") if isinstance(res.get("requests"), dict) else {}
    most_cpus = device.cpu.threads.value * sockets
    most_memory = pool.device_memory_bytes * sockets
    cpus, memory = parse_quantity(limits.get("cpu")), parse_quantity(limits.get("memory"))
    for name, got, most, unit in (("cpu", cpus, most_cpus, "CPUs"), ("memory", memory, most_memory, "bytes")):
        if got is None:
            out.append(m.finding("PLN009", path + ("resources", "limits"),
                                 f"{what}, but the engine container sets no {name} limit",
                                 fix=f"set resources.limits.{name} (and requests equal) within {sockets:g} socket(s)"))
        elif float(got) > most * (1 + 1e-9):
            out.append(m.finding("PLN009", path + ("resources", "limits", name),
                                 f"{name}: {limits[name]} exceeds the {sockets:g} socket(s) the plan gives the pod "
                                 f"({most:.0f} {unit} of {device.name})",
                                 fix=f"request at most {most:.0f} {unit}"))
        elif parse_quantity(requests.get(name)) != got:
            out.append(m.finding("PLN009", path + ("resources", "requests", name),
                                 f"{name}: request {requests.get(name, 'missing')} differs from limit {limits[name]}: "
                                 "without Guaranteed QoS the engine's threads get no exclusive cores",
                                 fix=f"set resources.requests.{name}: {limits[name]}"))
    env_spec = fw.env_for(device.name, device.vendor)
    if env_spec is None:
        return out
    env = {str(v.get("name")): v.get("value") for v in c.get("env") or [] if isinstance(v, dict)}
    for key, value in sorted(env_spec.fixed.items()):
        if env.get(key) != value:
            out.append(m.finding("PLN009", path + ("env",), f"{key} is {env.get(key, 'missing')!r}; {fw.name} on "
                                                            f"{device.name} needs {value!r}",
                                 fix=f"set env {key}={value}"))
    kv_name = env_spec.kv_cache_gib
    if not kv_name or e.allocation.engines.get(e.role) is None:
        return out
    raw = env.get(kv_name)
    kv = int(raw) if isinstance(raw, str) and raw.isdigit() else None
    if kv is None or kv < 1:
        out.append(m.finding("PLN009", path + ("env",), f"{kv_name} is {raw!r}, not a whole number of GiB: "
                                                        f"{fw.name} then sizes its KV cache by its own default",
                             fix=f"set {kv_name} to the KV cache per rank in GiB (`infra render` sizes it)"))
        return out
    ranks = 1 if share else a.devices_per_worker // max(1, a.nodes_per_worker)
    weights = _weight_bytes(model_ref, a.precision, catalog)
    need = ranks * kv * 2**30 + weights
    if memory is not None and need > float(memory):
        out.append(m.finding("PLN009", path + ("env",),
                             f"{kv_name}={kv} GiB for each of {ranks} rank(s) plus {weights / 2**30:.1f} GiB of "
                             f"weights exceeds the pod's memory limit {limits.get('memory')}",
                             fix=f"lower {kv_name} or raise the memory limit (`infra render` sizes both)"))
    return out


def _weight_bytes(model_ref: str | None, precision: str, catalog: Catalog) -> float:

    try:
        spec = catalog.model(model_ref) if model_ref else None
    except CatalogError:
        spec = None
    return spec.params_total_b * 1e9 * BYTES_PER_PARAM.get(precision, 2.0) if spec is not None else 0.0


class _AnyCount:
    """DeviceNames stand-in for DRA pods: no extended resource counts, so claims are counted."""

    def is_count(self, name: str) -> bool:
        return False


def check_plan(manifests: list[Manifest], plan: DeploymentPlan, plan_path: str,
               catalog: Catalog) -> tuple[list[Finding], list[str]]:
    """Findings of plan consistency of a tree rendered for Kubernetes itself, and notes on what could not be
    checked (a tree for another deployment target is checked by `infra.validators.targets.check_target_plan`)."""
    cluster = from_plan(plan, plan_path)
    pools = {p.name: p for p in cluster.pools}
    pf = _PlanFile(plan_path)
    fingerprint = plan.spec.fingerprint
    out: list[Finding] = []
    notes: list[str] = []
    matched: set[int] = set()
    services = {s.name: s for s in plan.spec.services}
    for e in _expected(plan):
        si, ai = e.index
        where = ("spec", "services", si, "allocations", ai)
        found = _workload_for(e, manifests)
        if found is None:
            out.append(rule("PLN001").at(plan_path, pf.line(where), f"{e.service}/{e.alloc_id}",
                                         f"no workload object {e.name!r} ({e.role}) for allocation {e.alloc_id} of "
                                         f"service {e.service}", field=f"spec.services[{si}].allocations[{ai}]"))
            continue
        m, templates, replicas_path = found
        matched.add(id(m))
        a = e.allocation
        got = _get(m.data, replicas_path)
        got = 1 if got is None else got
        if got != e.replicas:
            what = "groups" if kind_of(m.kind, m.api_version).groups else "replicas"
            out.append(m.finding("PLN003", replicas_path, f"{got} {what} for {e.role}, the plan places "
                                                          f"{e.replicas}", fix=f"set replicas: {e.replicas}"))
        if m.annotations.get("infra.dev/plan-fingerprint") != fingerprint:
            out.append(m.finding("PLN007", ("metadata", "annotations"),
                                 f"plan-fingerprint is {m.annotations.get('infra.dev/plan-fingerprint')!r}, the plan's "
                                 f"is {fingerprint!r}"))
        if a.nodes_per_worker > 1:
            size = _get(m.data, replicas_path[:-1] + ("leaderWorkerTemplate", "size"))
            if not kind_of(m.kind, m.api_version).groups or size != a.nodes_per_worker:
                out.append(m.finding("PLN005", replicas_path[:-1] + ("leaderWorkerTemplate", "size"),
                                     f"a worker spans {a.nodes_per_worker} nodes, "
                                     f"but the object is a {m.kind} with group size {size or 1}",
                                     fix=f"use a LeaderWorkerSet with leaderWorkerTemplate.size: "
                                         f"{a.nodes_per_worker}"))
        pool = pools.get(a.pool)
        fw = catalog.framework(a.framework)
        svc = services[e.service]
        serving = [t for t in templates if t.role.split("/")[-1] in ("pod", "leader")] or templates[:1]
        device = catalog.tables["devices"].find(a.device)
        for t in templates:
            if pool is not None and device is not None and device.cpu is not None:
                out += _compare_cpu(m, t, e, pool, device, fw, svc.model or svc.model_id, catalog)
            else:
                out += _compare_devices(m, t, e, pool, manifests)
            if pool is not None and pool.node_selector:
                sel = t.spec.get("nodeSelector") if isinstance(t.spec.get("nodeSelector"), dict) else {}
                missing = {k: v for k, v in pool.node_selector.items() if sel.get(k) != v}
                if missing:
                    out.append(m.finding("PLN008", t.spec_path + ("nodeSelector",),
                                         f"pods do not select pool {pool.name}'s nodes ({missing} missing)",
                                         fix=f"add {missing} to nodeSelector"))
        if fw.cli is None:
            out.append(m.finding("PLN006", ("spec",), f"{a.framework} has no `cli` in the catalog: its engine "
                                                      "arguments were not checked against the plan"))
            continue
        for t in serving:
            engine = next(((p, c) for p, c in t.containers(init=False)
                           if engine_args(c, catalog, a.framework) is not None), None)
            if engine is None:
                engine = next(iter(t.containers(init=False)), None)
            if engine is None:
                continue
            # A stage's model may be a part of a repository (`org/name/visual`): the engine loads the repository, or
            # the conversion of it the framework's catalog entry names.
            model_id = svc.model_id
            if not svc.runs_llm_engine and model_id:
                repo = "/".join(model_id.split("/")[:2])
                model_id = fw.checkpoints.get(repo, repo)
            out += _compare_args(m, engine[0], engine[1], t, e, fw, model_id, manifests)
    want_names = {x.name for x in _expected(plan)}
    # CPU stages of pipelines are no services of the plan: the pipeline checks look after their objects.
    cpu_stages = {f"{p.service}-{st.name}" for p in plan.spec.pipelines for st in p.stages
                  if st.unit not in services}
    allocs = {(x.service, x.alloc_id) for x in _expected(plan)}
    for m in manifests:
        svc_label, alloc = m.labels.get("infra.dev/service"), m.labels.get("infra.dev/allocation")
        if svc_label in cpu_stages:
            continue
        if kind_of(m.kind, m.api_version).serves and id(m) not in matched:
            out.append(m.finding("PLN002", ("metadata", "name"), f"{m.ref} deploys no allocation of the plan "
                                                                 f"(expected one of {sorted(want_names)})"))
        elif svc_label is not None and svc_label not in services:
            out.append(m.finding("PLN002", ("metadata", "labels"), f"service {svc_label!r} is not in the plan"))
        elif alloc is not None and svc_label is not None and (svc_label, alloc) not in allocs:
            out.append(m.finding("PLN002", ("metadata", "labels"), f"allocation {alloc!r} of {svc_label} is not in "
                                                                   "the plan"))

    out += check_pipelines(manifests, plan, plan_path, pf.line)
    out += check_routing(manifests, plan, plan_path, pf.line)
    out += check_objective_alerts(manifests, plan, plan_path, pf.line, catalog)
    return out, notes
