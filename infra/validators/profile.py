"""Cluster-profile rules: the resources and node labels a manifest uses exist in the cluster, a pod's devices fit
one node, custom resources are installed at the version used, pods use the cluster's scheduler and namespace."""

from __future__ import annotations

import difflib
from decimal import Decimal

from infra.catalog.kinds import api_group, kind_of
from infra.validators.cluster import ClusterView, DeviceNames
from infra.validators.findings import Finding
from infra.validators.manifests import Manifest
from infra.validators.pods import pod_templates
from infra.validators.quantity import parse_quantity
from infra.validators.semantic import is_extended

# Labels every node carries whatever the profile says.
UNIVERSAL_LABELS = {"kubernetes.io/os", "kubernetes.io/arch", "kubernetes.io/hostname"}
# conventions.crds keys of the custom resources deployment targets render (KServe's LLMInferenceService, llm-d's
# InferencePool).
TARGET_CRD_KEYS = {"kserve", "inference_extension", "dynamo"}


def _near(word: str, options: set[str]) -> str | None:
    near = difflib.get_close_matches(word, sorted(options), n=1)
    return f"did you mean {near[0]!r}?" if near else None


def check_profile(m: Manifest, cluster: ClusterView, names: DeviceNames) -> list[Finding]:
    out: list[Finding] = []
    group = api_group(m.api_version)
    kind = kind_of(m.kind, m.api_version)
    key = kind.crd if kind.group == group else None
    if key is not None:
        installed = cluster.crds.get(key)
        if installed is None:
            # The resources of a deployment target (`infra render --target kserve|llm-d`) were asked for by name:
            # a profile that does not list them yet only warns.
            out.append(m.finding("PRO004", ("apiVersion",), f"{m.kind} ({m.api_version}) is not installed in "
                                                            f"cluster {cluster.name!r}",
                                 fix=f"install it and list it as conventions.crds.{key}, or do without it",
                                 severity="warning" if key in TARGET_CRD_KEYS else None))
        elif installed.rsplit("/", 1)[0] == group and installed != m.api_version:
            out.append(m.finding("PRO004", ("apiVersion",), f"cluster {cluster.name!r} serves {installed}, not "
                                                            f"{m.api_version}", fix=f"use apiVersion: {installed}"))
    if m.namespace and m.namespace != cluster.namespace:
        out.append(m.finding("PRO005", ("metadata", "namespace"), f"namespace {m.namespace!r} is not the "
                                                                  f"cluster's {cluster.namespace!r}"))
    known = cluster.resource_names()
    labels = cluster.node_labels()
    for t in pod_templates(m):
        sched = t.spec.get("schedulerName")
        if isinstance(sched, str) and sched != cluster.scheduler:
            out.append(m.finding("PRO005", t.spec_path + ("schedulerName",),
                                 f"schedulerName {sched!r} is not the cluster's {cluster.scheduler!r}"))
        selector = t.spec.get("nodeSelector")
        for k, v in (selector.items() if isinstance(selector, dict) else []):
            out += _label(m, t.spec_path + ("nodeSelector", k), str(k), [str(v)], labels)
        aff = (t.spec.get("affinity") or {}).get("nodeAffinity") if isinstance(t.spec.get("affinity"), dict) \
            else None
        req = aff.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(aff, dict) else None
        terms = req.get("nodeSelectorTerms") if isinstance(req, dict) else None
        for i, term in enumerate(terms if isinstance(terms, list) else []):
            for j, e in enumerate((term or {}).get("matchExpressions") or []):
                if isinstance(e, dict) and e.get("operator") == "In":
                    out += _label(m, t.spec_path + ("affinity", "nodeAffinity",
                                                    "requiredDuringSchedulingIgnoredDuringExecution",
                                                    "nodeSelectorTerms", i, "matchExpressions", j, "key"),
                                  str(e.get("key")), [str(v) for v in e.get("values") or []], labels)
        for path, c in t.containers():
            res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
            limits = res.get("limits") if isinstance(res.get("limits"), dict) else {}
            for section in ("limits", "requests"):
                table = res.get(section) if isinstance(res.get(section), dict) else {}
                for name in table:
                    if is_extended(str(name)) and str(name) not in known:
                        out.append(m.finding("PRO001", path + ("resources", section, name),
                                             f"{name} is not a resource of cluster {cluster.name!r} "
                                             f"(it offers {', '.join(sorted(known)) or 'none'})",
                                             fix=_near(str(name), known)))
            out += _fits(m, path, limits, cluster)
    return out


def _label(m: Manifest, path: tuple, key: str, values: list[str], labels: dict[str, set[str]]) -> list[Finding]:
    if key in UNIVERSAL_LABELS and key != "kubernetes.io/hostname":
        return []
    if key not in labels:
        return [m.finding("PRO002", path, f"node label {key!r} is not one the profile's nodes carry",
                          fix=_near(key, set(labels)) or "use a pool's node_selector label")]
    missing = [v for v in values if v not in labels[key]]
    if missing and len(missing) == len(values):
        return [m.finding("PRO002", path, f"no node of the profile has {key}={missing[0]!r}",
                          fix=f"use one of {sorted(labels[key])}")]
    return []


def _fits(m: Manifest, path: tuple, limits: dict, cluster: ClusterView) -> list[Finding]:
    out = []
    for name, raw in limits.items():
        q = parse_quantity(raw)
        pools = cluster.pools_for(str(name))
        if q is None or not pools:
            continue
        if any(str(name) in (p.count, p.shared_count) for p in pools):
            most = max(p.devices_per_node for p in pools)
            if q > most:
                out.append(m.finding("PRO003", path + ("resources", "limits", name),
                                     f"{raw} x {name} in one pod, but nodes have at most {most}",
                                     fix="split the engine across pods with a LeaderWorkerSet (one pod per node)"))
        for p in pools:
            if str(name) == p.memory and p.memory_units_per_device is not None and \
                    q > Decimal(p.memory_units_per_device):
                out.append(m.finding("PRO003", path + ("resources", "limits", name),
                                     f"{raw} units of {name} exceed one {p.device} ({p.memory_units_per_device} "
                                     f"units of {p.memory_unit} bytes)",
                                     fix=f"request at most {p.memory_units_per_device}"))
                break
    return out
