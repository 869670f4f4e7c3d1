"""Where pods hide in each workload kind: the pod templates of an object, with their paths, labels and the size
of the group they form (a LeaderWorkerSet group is one leader plus `size - 1` workers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from infra.catalog.kinds import kind_of
from infra.intent.yamlio import PathKey
from infra.validators.manifests import Manifest


@dataclass
class PodTemplate:
    """One pod template inside an object."""

    manifest: Manifest
    path: PathKey
    """Path of the template (a PodTemplateSpec, or the Pod itself)."""
    spec: dict[str, Any]
    labels: dict[str, str]
    role: str = "pod"
    """`pod`, or `leader` / `worker` in a LeaderWorkerSet, or the role / task name."""
    pods_per_group: int = 1
    """How many pods of this template one group (one engine instance) has."""
    group: str = ""
    """Identifies the group the template belongs to (object plus role), for summing devices per group."""

    @property
    def spec_path(self) -> PathKey:
        return self.path if self.manifest.kind == "Pod" else self.path + ("spec",)

    def containers(self, init: bool = True) -> Iterator[tuple[PathKey, dict[str, Any]]]:
        """(path, container) for containers (and init containers) that are mappings."""
        keys = ("initContainers", "containers") if init else ("containers",)
        for key in keys:
            items = self.spec.get(key)
            if isinstance(items, list):
                for i, c in enumerate(items):
                    if isinstance(c, dict):
                        yield self.spec_path + (key, i), c


def _labels(node: Any) -> dict[str, str]:
    meta = node.get("metadata") if isinstance(node, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def _template(m: Manifest, path: PathKey, node: Any, **kw: Any) -> PodTemplate | None:
    if not isinstance(node, dict):
        return None
    spec = node.get("spec")
    if not isinstance(spec, dict):
        return None
    return PodTemplate(m, path, spec, _labels(node), **kw)


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _lws_templates(m: Manifest, base: PathKey, lws: Any, group: str) -> list[PodTemplate]:
    """Leader and worker templates of a LeaderWorkerSet spec (also a DisaggregatedSet role's)."""
    lwt = lws.get("leaderWorkerTemplate") if isinstance(lws, dict) else None
    if not isinstance(lwt, dict):
        return []
    size = _int(lwt.get("size"), 1)
    path = base + ("leaderWorkerTemplate",)
    out = []
    leader = lwt.get("leaderTemplate")
    worker = _template(m, path + ("workerTemplate",), lwt.get("workerTemplate"), role="worker",
                       pods_per_group=size - 1 if isinstance(leader, dict) else size, group=group)
    if isinstance(leader, dict):
        t = _template(m, path + ("leaderTemplate",), leader, role="leader", pods_per_group=1, group=group)
        if t:
            out.append(t)
    if worker:
        out.append(worker)
    return out


def pod_templates(m: Manifest) -> list[PodTemplate]:
    """Every pod template of an object (empty for kinds without pods), where its kind keeps them
    (`infra.catalog.kinds`)."""
    data, spec = m.data, m.data.get("spec")
    pods = kind_of(m.kind, m.api_version).pods
    if pods == "self":
        t = _template(m, (), data, group=m.ref)
        return [t] if t else []
    if not isinstance(spec, dict):
        return []
    if pods == "template":
        t = _template(m, ("spec", "template"), spec.get("template"), group=m.ref)
        return [t] if t else []
    if pods == "job-template":
        job = spec.get("jobTemplate")
        jspec = job.get("spec") if isinstance(job, dict) else None
        t = _template(m, ("spec", "jobTemplate", "spec", "template"),
                      jspec.get("template") if isinstance(jspec, dict) else None, group=m.ref)
        return [t] if t else []
    if pods == "leader-worker":
        return _lws_templates(m, ("spec",), spec, m.ref)
    if pods == "roles":
        out = []
        roles = spec.get("roles")
        for i, role in enumerate(roles if isinstance(roles, list) else []):
            if isinstance(role, dict):
                name = str(role.get("name") or i)
                # A role carries a LeaderWorkerSet spec under `spec`.
                lws, base = (role["spec"], ("spec", "roles", i, "spec")) if isinstance(role.get("spec"), dict) \
                    else (role, ("spec", "roles", i))
                for t in _lws_templates(m, base, lws, f"{m.ref}[{name}]"):
                    t.role = f"{name}/{t.role}"
                    out.append(t)
        return out
    if pods != "tasks":
        return []
    tasks = spec.get("tasks")
    out = []
    for i, task in enumerate(tasks if isinstance(tasks, list) else []):
        if isinstance(task, dict):
            t = _template(m, ("spec", "tasks", i, "template"), task.get("template"),
                          role=str(task.get("name") or i), pods_per_group=_int(task.get("replicas"), 1),
                          group=f"{m.ref}[{task.get('name') or i}]")
            if t:
                out.append(t)
    return out


def selector_labels(node: Any) -> tuple[dict[str, str], list[dict[str, Any]]] | None:
    """matchLabels and matchExpressions of a LabelSelector (or a plain label map); None when absent."""
    if not isinstance(node, dict):
        return None
    if "matchLabels" in node or "matchExpressions" in node:
        labels = node.get("matchLabels") if isinstance(node.get("matchLabels"), dict) else {}
        exprs = node.get("matchExpressions") if isinstance(node.get("matchExpressions"), list) else []
        return {str(k): str(v) for k, v in labels.items()}, [e for e in exprs if isinstance(e, dict)]
    return {str(k): str(v) for k, v in node.items() if not isinstance(v, (dict, list))}, []


def selects(selector: tuple[dict[str, str], list[dict[str, Any]]], labels: dict[str, str]) -> bool:
    """Whether a selector (matchLabels, matchExpressions) selects a set of labels."""
    match, exprs = selector
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    for e in exprs:
        key, op = str(e.get("key")), e.get("operator")
        values = [str(v) for v in e.get("values") or []]
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
