"""What a schema cannot see: labels and selectors, names, whole devices, requests against limits, the parallel
layout against the devices, ports and probes, duplicates, quantities, references inside a pod, the KV connector
of prefill/decode workers, Volcano gangs against the pods that join them."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Iterable

from infra.catalog.kinds import kind_of
from infra.catalog.loader import Catalog
from infra.catalog.schema import KV_TRANSFER_SETTINGS
from infra.validators.cluster import DeviceNames
from infra.validators.engine_args import EngineArgs, engine_args, file_settings
from infra.validators.findings import Finding
from infra.validators.manifests import Manifest
from infra.validators.names import label_problem, port_name_problem, subdomain_problem
from infra.validators.pods import PodTemplate, pod_templates, selector_labels, selects
from infra.validators.quantity import is_whole, parse_quantity

NATIVE_RESOURCES = {"cpu", "memory", "ephemeral-storage", "storage", "pods"}
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def is_extended(name: str) -> bool:
    """Extended resources are fully qualified names outside kubernetes.io (devices, HAMi slices)."""
    if name in NATIVE_RESOURCES or name.startswith("hugepages-") or "/" not in name:
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def _items(node: Any) -> list[tuple[int, dict[str, Any]]]:
    return [(i, x) for i, x in enumerate(node) if isinstance(x, dict)] if isinstance(node, list) else []


def _dups(m: Manifest, entries: Iterable[tuple[tuple, str]], what: str) -> list[Finding]:
    """SEM009 for every name seen before in `entries` ((path, name) pairs)."""
    out, seen = [], set()
    for path, name in entries:
        if name in seen:
            out.append(m.finding("SEM009", path, f"duplicate {what} {name!r}"))
        seen.add(name)
    return out


# --- names -------------------------------------------------------------------------------------------------


def check_names(m: Manifest) -> list[Finding]:
    out = []
    if m.name:
        why = label_problem(m.name) if kind_of(m.kind, m.api_version).label_named else subdomain_problem(m.name)
        if why:
            out.append(m.finding("SEM003", ("metadata", "name"), f"object name {why}"))
    for t in pod_templates(m):
        for path, c in t.containers():
            name = c.get("name")
            if isinstance(name, str) and label_problem(name):
                out.append(m.finding("SEM003", path + ("name",), f"container name {label_problem(name)}"))
            for j, port in _items(c.get("ports")):
                pname = port.get("name")
                if isinstance(pname, str) and port_name_problem(pname):
                    out.append(m.finding("SEM003", path + ("ports", j, "name"), port_name_problem(pname)))
        for j, vol in _items(t.spec.get("volumes")):
            vname = vol.get("name")
            if isinstance(vname, str) and label_problem(vname):
                out.append(m.finding("SEM003", t.spec_path + ("volumes", j, "name"),
                                     f"volume name {label_problem(vname)}"))
    return out


# --- duplicates and references ------------------------------------------------------------------------------


def check_duplicates(m: Manifest) -> list[Finding]:
    out = []
    for t in pod_templates(m):
        out += _dups(m, ((p + ("name",), str(c.get("name"))) for p, c in t.containers()), "container name")
        out += _dups(m, ((t.spec_path + ("volumes", j, "name"), str(v.get("name")))
                         for j, v in _items(t.spec.get("volumes"))), "volume name")
        for path, c in t.containers():
            out += _dups(m, ((path + ("env", j, "name"), str(e.get("name"))) for j, e in _items(c.get("env"))),
                         "env var")
            out += _dups(m, ((path + ("ports", j, "containerPort"), f"{p.get('containerPort')}/"
                              f"{p.get('protocol', 'TCP')}") for j, p in _items(c.get("ports"))), "container port")
            out += _dups(m, ((path + ("ports", j, "name"), str(p.get("name")))
                             for j, p in _items(c.get("ports")) if p.get("name")), "port name")
    return out


def check_duplicate_objects(manifests: list[Manifest]) -> list[Finding]:
    """SEM009 for an object defined twice (same group, kind, namespace and name) anywhere in the tree."""
    out, seen = [], {}
    for m in manifests:
        key = (m.api_version.split("/")[0] if "/" in m.api_version else "", m.kind, m.namespace, m.name)
        if key in seen:
            first = seen[key]
            out.append(m.finding("SEM009", ("metadata", "name"),
                                 f"{m.ref} is defined twice (first at {first.file}:{first.line(('metadata',))})"))
        else:
            seen[key] = m
    return out


def check_references(m: Manifest, manifests: list[Manifest]) -> list[Finding]:
    """Volume mounts name volumes; container claims name pod resourceClaims; DRA constraints name requests."""
    out = []
    for t in pod_templates(m):
        volumes = {str(v.get("name")) for _, v in _items(t.spec.get("volumes"))}
        where = kind_of(m.kind, m.api_version).claim_templates
        if where is not None:
            vct = _node(t.manifest.data, ("spec", *where))
            for _, claim in _items(vct.get("volumeClaimTemplates") if isinstance(vct, dict) else None):
                meta = claim.get("metadata")
                if isinstance(meta, dict) and meta.get("name"):
                    volumes.add(str(meta["name"]))
        claims = {str(c.get("name")) for _, c in _items(t.spec.get("resourceClaims"))}
        for path, c in t.containers():
            for j, vm in _items(c.get("volumeMounts")):
                if str(vm.get("name")) not in volumes:
                    out.append(m.finding("SEM011", path + ("volumeMounts", j, "name"),
                                         f"volume mount {vm.get('name')!r} names no volume of the pod",
                                         fix=f"declare it under volumes, or use one of: {', '.join(sorted(volumes))}"
                                         if volumes else None))
            res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
            for j, claim in _items(res.get("claims")):
                if str(claim.get("name")) not in claims:
                    out.append(m.finding("SEM011", path + ("resources", "claims", j, "name"),
                                         f"resource claim {claim.get('name')!r} is not in the pod's resourceClaims"))
        templates = {x.name: x for x in manifests if x.kind == "ResourceClaimTemplate"}
        for j, rc in _items(t.spec.get("resourceClaims")):
            name = rc.get("resourceClaimTemplateName")
            if isinstance(name, str) and templates and name not in templates:
                out.append(m.finding("SEM011", t.spec_path + ("resourceClaims", j, "resourceClaimTemplateName"),
                                     f"ResourceClaimTemplate {name!r} is not in the tree",
                                     severity="warning", fix="add the template, or name one that exists"))
    if m.kind in ("ResourceClaimTemplate", "ResourceClaim"):
        spec = m.data.get("spec", {})
        base: tuple = ("spec",)
        if m.kind == "ResourceClaimTemplate":
            spec = spec.get("spec", {}) if isinstance(spec, dict) else {}
            base = ("spec", "spec")
        devices = spec.get("devices", {}) if isinstance(spec, dict) else {}
        devices = devices if isinstance(devices, dict) else {}
        requests = {str(r.get("name")) for _, r in _items(devices.get("requests"))}
        for _, r in _items(devices.get("requests")):
            for _, sub in _items(r.get("firstAvailable")):
                requests.add(f"{r.get('name')}/{sub.get('name')}")
        for j, con in _items(devices.get("constraints")):
            for k, name in enumerate(con.get("requests") or []):
                if str(name) not in requests:
                    out.append(m.finding("SEM011", base + ("devices", "constraints", j, "requests", k),
                                         f"constraint names request {name!r}, which the claim does not have",
                                         fix=f"use one of: {', '.join(sorted(requests))}"))
    return out


# --- selectors, ports, probes -------------------------------------------------------------------------------


def check_workload_selector(m: Manifest) -> list[Finding]:
    """SEM001: a Deployment (StatefulSet, ...) selects its own pods."""
    if not kind_of(m.kind, m.api_version).selects_template:
        return []
    spec = m.data.get("spec")
    templates = pod_templates(m)
    if not isinstance(spec, dict) or not templates:
        return []
    sel = selector_labels(spec.get("selector"))
    if sel is None or (not sel[0] and not sel[1]):
        return [m.finding("SEM001", ("spec", "selector"), "the workload has no selector labels",
                          fix="set spec.selector.matchLabels to labels of spec.template.metadata.labels")]
    if not selects(sel, templates[0].labels):
        wrong = {k: v for k, v in sel[0].items() if templates[0].labels.get(k) != v}
        return [m.finding("SEM001", ("spec", "selector"),
                          f"selector {wrong or sel[0]} does not match the pod template's labels "
                          f"{templates[0].labels}")]
    return []


def _ports(t: PodTemplate) -> tuple[set[int], set[str]]:
    numbers, names = set(), set()
    for _, c in t.containers(init=False):
        for _, p in _items(c.get("ports")):
            if isinstance(p.get("containerPort"), int):
                numbers.add(p["containerPort"])
            if isinstance(p.get("name"), str):
                names.add(p["name"])
    return numbers, names


def check_probes(m: Manifest) -> list[Finding]:
    """SEM007: probes use a port the container declares (by number or name)."""
    out = []
    for t in pod_templates(m):
        for path, c in t.containers():
            numbers = {p["containerPort"] for _, p in _items(c.get("ports")) if isinstance(p.get("containerPort"),
                                                                                            int)}
            names = {p["name"] for _, p in _items(c.get("ports")) if isinstance(p.get("name"), str)}
            for probe in PROBES:
                node = c.get(probe)
                if not isinstance(node, dict):
                    continue
                for handler in ("httpGet", "tcpSocket", "grpc"):
                    h = node.get(handler)
                    if not isinstance(h, dict) or "port" not in h:
                        continue
                    port = h["port"]
                    ok = port in numbers if isinstance(port, int) else str(port) in names
                    if not ok:
                        declared = sorted(numbers) + sorted(names)
                        out.append(m.finding("SEM007", path + (probe, handler, "port"),
                                             f"{probe} uses port {port!r}, which container {c.get('name')!r} "
                                             f"does not declare",
                                             fix=f"probe one of {declared}" if declared else
                                             "declare the port under the container's ports"))
    return out


def _selected(selector, manifests: list[Manifest]) -> list[PodTemplate]:
    return [t for x in manifests for t in pod_templates(x) if selects(selector, t.labels)]


def _selected_in_tree(m: Manifest, spec: dict[str, Any], manifests: list[Manifest],
                      charted: list[dict[str, str]] | None) -> tuple[list[PodTemplate], list[Finding]]:
    """The pod templates of the tree that `spec.selector` selects, and the SEM002 finding when it selects none.
    Pods a chart or an operator creates from the tree (`charted`) are not there, and their ports are theirs: a
    selector of those only gives no templates and no finding."""
    sel = selector_labels(spec.get("selector"))
    if sel is None:
        return [], []
    pods = _selected(sel, manifests)
    if pods or any(selects(sel, labels) for labels in charted or []):
        return pods, []
    return [], [m.finding("SEM002", ("spec", "selector"), "selector selects no pod template in the tree")]


def check_service_targets(m: Manifest, manifests: list[Manifest],
                          charted: list[dict[str, str]] | None = None) -> list[Finding]:
    """SEM002 / SEM008: Services, InferencePools, PodMonitors and PDBs select pods of the tree, on ports those pods
    declare. `charted` are the labels of pods a Helm values file of the tree has a chart create, or an operator
    creates from an object of the tree (an InferencePool over llm-d's model-service pods, a PodMonitor over
    KServe's, select those)."""
    spec = m.data.get("spec")
    if not isinstance(spec, dict):
        return []
    if m.kind == "Service" and spec.get("type") != "ExternalName" and isinstance(spec.get("selector"), dict):
        sel = selector_labels(spec["selector"])
        pods = _selected(sel, manifests)
        if not pods:
            return [m.finding("SEM002", ("spec", "selector"), f"selector {spec['selector']} selects no pod "
                                                              "template in the tree")]
        numbers, names = set(), set()
        for t in pods:
            n, s = _ports(t)
            numbers |= n
            names |= s
        out = []
        for j, port in _items(spec.get("ports")):
            target = port.get("targetPort", port.get("port"))
            ok = target in numbers if isinstance(target, int) else str(target) in names
            if not ok:
                out.append(m.finding("SEM008", ("spec", "ports", j, "targetPort" if "targetPort" in port else "port"),
                                     f"targetPort {target!r} is not a port of the pods the Service selects",
                                     fix=f"use one of {sorted(numbers) + sorted(names)}"))
        return out
    if m.kind in ("InferencePool", "PodMonitor"):
        pods, missing = _selected_in_tree(m, spec, manifests, charted)
        if not pods:
            return missing
    if m.kind == "InferencePool":
        numbers = set().union(*(_ports(t)[0] for t in pods))
        return [m.finding("SEM008", ("spec", "targetPorts", j, "number"),
                          f"target port {p.get('number')!r} is not a container port of the selected pods",
                          fix=f"use one of {sorted(numbers)}")
                for j, p in _items(spec.get("targetPorts")) if p.get("number") not in numbers]
    if m.kind == "PodMonitor":
        names = set().union(*(_ports(t)[1] for t in pods))
        return [m.finding("SEM008", ("spec", "podMetricsEndpoints", j, "port"),
                          f"port {p.get('port')!r} is not a named container port of the pods the PodMonitor "
                          "selects: Prometheus would scrape none of them", fix=f"use one of {sorted(names)}")
                for j, p in _items(spec.get("podMetricsEndpoints")) if "port" in p and p.get("port") not in names]
    if m.kind == "PodDisruptionBudget":
        sel = selector_labels(spec.get("selector"))
        if sel is not None and not _selected(sel, manifests):
            return [m.finding("SEM002", ("spec", "selector"), "selector selects no pod template in the tree")]
    return []


# --- resources ----------------------------------------------------------------------------------------------


def _resources(c: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
    limits = res.get("limits") if isinstance(res.get("limits"), dict) else {}
    requests = res.get("requests") if isinstance(res.get("requests"), dict) else {}
    return limits, requests


def check_resources(m: Manifest, names: DeviceNames) -> list[Finding]:
    """SEM010 quantities parse; SEM004 extended resources are whole; SEM005 requests == limits;
    SEM013 HAMi slices keep the count at 1."""
    out = []
    for t in pod_templates(m):
        for path, c in t.containers():
            limits, requests = _resources(c)
            for section, table in (("limits", limits), ("requests", requests)):
                for name, raw in table.items():
                    where = path + ("resources", section, name)
                    value = parse_quantity(raw)
                    if value is None:
                        out.append(m.finding("SEM010", where, f"{name}: {raw!r} is not a quantity"))
                        continue
                    if is_extended(str(name)) and not is_whole(value):
                        out.append(m.finding("SEM004", where, f"{name}: {raw!r} is not a whole number; extended "
                                                              "resources cannot be fractional"))
            for name in sorted(set(limits) | set(requests)):
                if not is_extended(str(name)):
                    continue
                lim, req = parse_quantity(limits.get(name)), parse_quantity(requests.get(name))
                if name not in limits:
                    out.append(m.finding("SEM005", path + ("resources", "requests", name),
                                         f"{name} is requested but has no limit",
                                         fix=f"set resources.limits.{name}: {requests[name]}"))
                elif name in requests and lim is not None and req is not None and lim != req:
                    out.append(m.finding("SEM005", path + ("resources", "requests", name),
                                         f"{name}: request {requests[name]!r} differs from limit {limits[name]!r}",
                                         fix=f"set both to {limits[name]}"))
            counts = {n: parse_quantity(v) for n, v in limits.items() if names.is_count(str(n))}
            slices = [n for n in limits if names.is_slice(str(n))]
            if slices and any(v is not None and v > 1 for v in counts.values()):
                many = {n: limits[n] for n, v in counts.items() if v is not None and v > 1}
                out.append(m.finding("SEM013", path + ("resources", "limits"),
                                     f"a slice ({', '.join(map(str, slices))}) with {many}: slicing applies to one "
                                     "device, so the count must be 1"))
    return out


def devices_of(t: PodTemplate, names: DeviceNames, manifests: list[Manifest]) -> int:
    """Devices one pod of the template gets: device-count resources, or DRA claim-template request counts."""
    total = Decimal(0)
    for _, c in t.containers(init=False):
        limits, _ = _resources(c)
        for n, v in limits.items():
            q = parse_quantity(v)
            if names.is_count(str(n)) and q is not None:
                total += q
    if total == 0:
        templates = {x.name: x for x in manifests if x.kind == "ResourceClaimTemplate"}
        for _, rc in _items(t.spec.get("resourceClaims")):
            tmpl = templates.get(str(rc.get("resourceClaimTemplateName")))
            if tmpl is None:
                continue
            spec = tmpl.data.get("spec", {}).get("spec", {}) if isinstance(tmpl.data.get("spec"), dict) else {}
            devices = spec.get("devices", {}) if isinstance(spec, dict) else {}
            for _, r in _items(devices.get("requests") if isinstance(devices, dict) else None):
                exact = r.get("exactly") if isinstance(r.get("exactly"), dict) else r
                cls = str(exact.get("deviceClassName", ""))
                # NIC requests share a claim with the accelerator when pairing them on a PCIe root.
                if any(w in cls.lower() for w in ("nic", "net", "rdma")):
                    continue
                count = exact.get("count", 1)
                total += Decimal(count) if isinstance(count, int) else 0
    return int(total)


def config_maps(manifests: list[Manifest]) -> dict[str, dict[str, Any]]:
    return {m.name: m.data for m in manifests if m.kind == "ConfigMap" and m.api_version == "v1"}


def engine_of(t: PodTemplate, catalog: Catalog, manifests: list[Manifest]
              ) -> tuple[tuple, dict[str, Any], EngineArgs, str] | None:
    """(container path, container, its engine settings, why settings of a config file could not be read) for the
    first container that runs an engine the catalog knows. Settings an engine reads from a file come from the
    ConfigMap the pod mounts; flags win where both are given."""
    for path, c in t.containers(init=False):
        found = engine_args(c, catalog)
        if found is None:
            continue
        cli = catalog.framework(found.framework).cli
        why = ""
        if cli is not None and cli.config_file is not None:
            values, why = file_settings(t.spec, cli, config_maps(manifests))
            for setting, value in (values or {}).items():
                found.settings.setdefault(setting, value if isinstance(value, bool) else str(value))
        return path, c, found, why
    return None


def cpu_env_names(catalog: Catalog) -> set[str]:
    """Environment variables through which engines size their KV cache on CPU devices (catalog frameworks' `env`):
    a container that sets one runs its engine on CPU sockets."""
    return {e.kv_cache_gib for f in catalog.frameworks.values() for e in f.env.values() if e.kv_cache_gib}


def runs_on_cpu(container: dict[str, Any], catalog: Catalog) -> bool:
    names = {str(e.get("name")) for _, e in _items(container.get("env"))}
    return bool(names & cpu_env_names(catalog))


def check_parallel(m: Manifest, names: DeviceNames, catalog: Catalog, manifests: list[Manifest]) -> list[Finding]:
    """SEM006: TP x PP x DP = devices per group (devices per pod x pods per group); SEM012 when the engine's
    command is not recognised in a pod that requests devices."""
    out = []
    groups: dict[str, list[PodTemplate]] = {}
    for t in pod_templates(m):
        groups.setdefault(t.group, []).append(t)
    for templates in groups.values():
        per_group = sum(devices_of(t, names, manifests) * t.pods_per_group for t in templates)
        engines = [(t, engine_of(t, catalog, manifests)) for t in templates]
        found = [(t, e) for t, e in engines if e is not None]
        if not found:
            if per_group:
                t = templates[0]
                path = next((p for p, _ in t.containers(init=False)), t.spec_path)
                out.append(m.finding("SEM012", path + ("command",),
                                     f"{per_group} device(s) per group, but no container runs an engine command "
                                     "the catalog knows; tensor/pipeline/data parallel sizes were not checked"))
            continue
        t, (path, container, args, unread) = found[0]
        if not per_group and runs_on_cpu(container, catalog):
            # Ranks on CPU devices are sockets (NUMA nodes), which no resource counts: plan consistency (PLN009)
            # checks them against the plan.
            continue
        if args.duplicates:
            out.append(m.finding("SEM009", path + ("args",), f"engine flag(s) given twice: "
                                                              f"{', '.join(sorted(set(args.duplicates)))}",
                                 fix="give each flag once"))
        if unread:
            out.append(m.finding("SEM012", path, f"{args.framework} reads its settings from a file, and {unread}; "
                                                 "tensor/pipeline/data parallel sizes were not checked",
                                 fix="ship the engine's config file in a ConfigMap of the tree, mounted into the pod"))
            continue
        sizes = {s: args.int_setting(s) for s in ("tensor_parallel", "pipeline_parallel", "data_parallel",
                                                   "ulysses_degree")}
        bad = [s for s, v in sizes.items() if v is None]
        if bad:
            out.append(m.finding("SEM006", path + ("args",), f"{', '.join(bad)} is not a whole number"))
            continue
        tp, pp, dp = sizes["tensor_parallel"], sizes["pipeline_parallel"], sizes["data_parallel"]
        assert tp is not None and pp is not None and dp is not None
        # With data-parallel attention (SGLang --enable-dp-attention, TensorRT-LLM enable_attention_dp) the
        # attention groups split the tensor-parallel ranks: the world is TP x PP and DP must divide TP.
        inside = args.settings.get("attention_dp") in (True, "true", "True")
        if inside and tp % dp:
            out.append(m.finding("SEM006", path + ("args",),
                                 f"{args.framework} runs data-parallel attention with DP {dp}, which does not divide "
                                 f"TP {tp}", fix=f"make the tensor-parallel size a multiple of {dp}"))
            continue
        # A diffusion transformer's sequence-parallel (Ulysses) ranks take one device each, beside TP.
        sp = sizes["ulysses_degree"] or 1
        product = tp * pp * (1 if inside else dp) * sp
        if product != per_group:
            pods = sum(x.pods_per_group for x in templates)
            out.append(m.finding(
                "SEM006", path + ("args",),
                f"{args.framework} runs TP {tp} x PP {pp}" + (f" (DP {dp} attention inside TP)" if inside else
                                                               f" x DP {dp}") + (f" x SP {sp}" if sp > 1 else "")
                + f" = {product} ranks, but the group has {per_group} device(s) ({pods} pod(s))"))
    return out


def _cel_selectors(m: Manifest) -> list[tuple[tuple, str]]:
    """(path, expression) of every CEL selector of a DRA claim, claim template or device class."""
    spec = m.data.get("spec")
    if not isinstance(spec, dict):
        return []
    out: list[tuple[tuple, str]] = []

    def selectors(node: Any, base: tuple) -> None:
        for i, sel in _items(node.get("selectors") if isinstance(node, dict) else None):
            expr = sel.get("cel", {}).get("expression") if isinstance(sel.get("cel"), dict) else None
            if isinstance(expr, str):
                out.append((base + ("selectors", i, "cel", "expression"), expr))

    if m.kind == "DeviceClass":
        selectors(spec, ("spec",))
        return out
    base: tuple = ("spec",)
    if m.kind == "ResourceClaimTemplate":
        spec, base = spec.get("spec", {}), ("spec", "spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    for i, r in _items(devices.get("requests") if isinstance(devices, dict) else None):
        req = base + ("devices", "requests", i)
        if isinstance(r.get("exactly"), dict):
            selectors(r["exactly"], req + ("exactly",))
        for j, sub in _items(r.get("firstAvailable")):
            selectors(sub, req + ("firstAvailable", j))
    return out


def check_cel(m: Manifest) -> list[Finding]:
    """SEM014: DRA selector expressions are CEL (the schema sees only a string; the API server compiles them)."""
    if not m.api_version.startswith("resource.k8s.io/"):
        return []
    found = _cel_selectors(m)
    if not found:
        return []
    import celpy

    env = celpy.Environment()
    out = []
    for path, expr in found:
        try:
            env.compile(expr)
        except celpy.CELParseError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "syntax error"
            out.append(m.finding("SEM014", path, f"selector {expr!r} is not a CEL expression ({first[:120]})"))
    return out


PD_ROLES = ("prefill", "decode")
ROLE_LABEL = "infra.dev/role"


def pd_role(t: PodTemplate) -> str | None:
    """`prefill` or `decode` for a pod of a disaggregated deployment: by its role label (MANIFESTS.md), or the
    DisaggregatedSet role it belongs to; None otherwise."""
    role = t.labels.get(ROLE_LABEL) or t.role.split("/", 1)[0]
    return role if role in PD_ROLES else None


def check_kv_connector(m: Manifest, catalog: Catalog, manifests: list[Manifest]) -> list[Finding]:
    """SEM015: a prefill or decode worker tells its engine how the KV cache moves between the two (vLLM's
    --kv-transfer-config connector, SGLang's --disaggregation-mode / transfer backend, TensorRT-LLM's
    cache_transceiver_config). Without it each worker serves whole requests alone and the disaggregation the plan
    was verified with never happens."""
    out = []
    for t in pod_templates(m):
        role = pd_role(t)
        found = engine_of(t, catalog, manifests) if role is not None else None
        if found is None:
            continue  # not a prefill/decode pod, or an engine the catalog does not know (SEM012)
        path, _, args, unread = found
        if unread or any(args.settings.get(s) not in (None, "", False) for s in KV_TRANSFER_SETTINGS):
            continue  # a missing config file is reported on its own (SEM012)
        cli = catalog.framework(args.framework).cli
        spelled = [cli.flags[s] for s in KV_TRANSFER_SETTINGS if cli is not None and s in cli.flags]
        if cli is not None and cli.config_file is not None:
            spelled += [f"{cli.config_file.keys[s]} in {cli.config_file.path}" for s in KV_TRANSFER_SETTINGS
                        if s in cli.config_file.keys]
        out.append(m.finding(
            "SEM015", path + ("args",),
            f"{role} worker runs {args.framework} with no KV connector, so it never hands the KV cache "
            f"{'to decode' if role == 'prefill' else 'over from prefill'}: the deployment is not disaggregated",
            fix=(f"give {' or '.join(spelled)} (as `infra render` does for {args.framework})" if spelled else
                 f"{args.framework}'s catalog cli names no KV-transfer setting: serve it aggregated, or use an "
                 "engine that states one")))
    return out


GROUP_NAME = "scheduling.k8s.io/group-name"
"""Pod annotation naming the Volcano PodGroup a pod joins."""


def _node(data: Any, path: tuple) -> Any:
    for step in path:
        if isinstance(data, dict):
            data = data.get(step)
        elif isinstance(data, list) and isinstance(step, int) and 0 <= step < len(data):
            data = data[step]
        else:
            return None
    return data


def _groups_of(t: PodTemplate) -> int:
    """Replicas (groups) of the object or DisaggregatedSet role a pod template belongs to (1 when unset)."""
    m = t.manifest
    if m.kind == "Pod":
        return 1
    spec = _node(m.data, t.path[:4]) if m.kind == "DisaggregatedSet" else m.data.get("spec")
    value = spec.get("replicas", 1) if isinstance(spec, dict) else 1
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1


def check_gangs(manifests: list[Manifest]) -> list[Finding]:
    """SEM016: a Volcano PodGroup gangs exactly one group of pods. Its minMember equals the pods that name it (more
    and the gang never forms; fewer and it does not hold them together), and no LeaderWorkerSet names one PodGroup
    from its templates while running several groups: every group would join the same gang, so one group's pods
    could start without their peers. The LWS controller makes one PodGroup per group itself (Volcano provider)."""
    groups = {m.name: m for m in manifests
              if m.kind == "PodGroup" and m.api_version.startswith("scheduling.volcano.sh/")}
    members: dict[str, list[tuple[PodTemplate, int]]] = {}
    out = []
    for m in manifests:
        shared = False
        for t in pod_templates(m):
            meta = _node(m.data, t.path + ("metadata",)) if m.kind != "Pod" else m.data.get("metadata")
            annotations = meta.get("annotations") if isinstance(meta, dict) else None
            name = annotations.get(GROUP_NAME) if isinstance(annotations, dict) else None
            if not isinstance(name, str) or not name:
                continue
            n = _groups_of(t)
            members.setdefault(name, []).append((t, n * t.pods_per_group))
            if kind_of(m.kind, m.api_version).groups and n > 1 and not shared:
                shared = True
                out.append(m.finding(
                    "SEM016", t.path + ("metadata", "annotations"),
                    f"the {n} groups of {m.kind} {m.name} all join PodGroup {name}, so Volcano gangs them as one: "
                    "a group's leader and workers are not held together"))
    for name, pg in sorted(groups.items()):
        named = members.get(name)
        want = pg.data.get("spec", {}).get("minMember") if isinstance(pg.data.get("spec"), dict) else None
        if not named or not isinstance(want, int) or isinstance(want, bool):
            continue
        pods = sum(k for _, k in named)
        if want != pods:
            t = named[0][0]
            out.append(t.manifest.finding(
                "SEM016", t.path + ("metadata", "annotations"),
                f"{pods} pod(s) join PodGroup {name} but its minMember is {want}: "
                + ("the gang can never form" if want > pods else "the gang does not hold all its pods together"),
                fix=f"set PodGroup {name}'s minMember to {pods}, or give each gang its own PodGroup"))
    return out


def check_semantic(manifests: list[Manifest], names: DeviceNames, catalog: Catalog,
                   charted: list[dict[str, str]] | None = None) -> list[Finding]:
    """Every semantic rule over every object of the tree; `charted`: labels of pods Helm values of the tree create."""
    out = check_duplicate_objects(manifests) + check_gangs(manifests)
    for m in manifests:
        out += check_names(m)
        out += check_duplicates(m)
        out += check_references(m, manifests)
        out += check_workload_selector(m)
        out += check_probes(m)
        out += check_service_targets(m, manifests, charted)
        out += check_resources(m, names)
        out += check_parallel(m, names, catalog, manifests)
        out += check_kv_connector(m, catalog, manifests)
        out += check_cel(m)
    return out

