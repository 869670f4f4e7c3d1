"""Security rules: no privilege, no host namespaces or host paths, only the capability RDMA needs, secrets only by
reference, pinned images, resource limits, explicit service accounts."""

from __future__ import annotations

import re
from typing import Any

from infra.validators.findings import Finding
from infra.validators.manifests import Manifest
from infra.validators.pods import pod_templates

# GPUDirect RDMA pins memory (IPC_LOCK); nothing else is needed for serving.
ALLOWED_CAPABILITIES = {"IPC_LOCK"}
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL)", re.I)
SECRET_VALUE = re.compile(r"^(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|"
                          r"github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|"
                          r"AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\..*)$")


def image_problem(image: str) -> str | None:
    """Why an image reference is not pinned, or None."""
    if "@sha256:" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"image {image!r} has no tag (it means :latest)"
    tag = last.rsplit(":", 1)[1]
    if tag in ("latest", ""):
        return f"image {image!r} uses the moving tag {tag or '(empty)'!r}"
    return None


def _sc(node: Any) -> dict[str, Any]:
    return node if isinstance(node, dict) else {}


def check_security(m: Manifest) -> list[Finding]:
    out: list[Finding] = []
    for t in pod_templates(m):
        spec, sp = t.spec, t.spec_path
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(key) is True:
                out.append(m.finding("SEC002", sp + (key,), f"{key}: true shares the node's namespace with the pod",
                                     fix=f"remove {key}"))
        for j, vol in enumerate(spec.get("volumes") or []):
            if isinstance(vol, dict) and "hostPath" in vol:
                out.append(m.finding("SEC002", sp + ("volumes", j, "hostPath"),
                                     f"volume {vol.get('name')!r} mounts a host path",
                                     fix="use an emptyDir (medium: Memory for /dev/shm) or a PersistentVolumeClaim"))
        if not spec.get("serviceAccountName"):
            out.append(m.finding("SEC007", sp, f"pod template ({t.role}) does not name a service account"))
        for path, c in t.containers():
            cname = c.get("name")
            sc = _sc(c.get("securityContext"))
            if sc.get("privileged") is True:
                out.append(m.finding("SEC001", path + ("securityContext", "privileged"),
                                     f"container {cname!r} is privileged"))
            if sc.get("allowPrivilegeEscalation") is True:
                out.append(m.finding("SEC001", path + ("securityContext", "allowPrivilegeEscalation"),
                                     f"container {cname!r} allows privilege escalation"))
            caps = _sc(sc.get("capabilities")).get("add") or []
            for k, cap in enumerate(caps if isinstance(caps, list) else []):
                if str(cap).upper().removeprefix("CAP_") not in ALLOWED_CAPABILITIES:
                    out.append(m.finding("SEC003", path + ("securityContext", "capabilities", "add", k),
                                         f"container {cname!r} adds capability {cap!r}"))
            for k, env in enumerate(c.get("env") or []):
                if not isinstance(env, dict) or not isinstance(env.get("value"), str) or not env["value"]:
                    continue
                name, value = str(env.get("name")), env["value"]
                if SECRET_VALUE.match(value) or (SECRET_NAME.search(name) and not value.startswith("$(")):
                    out.append(m.finding("SEC004", path + ("env", k, "value"),
                                         f"env {name!r} of container {cname!r} holds a literal secret-looking value",
                                         fix=f"move it to a Secret and use valueFrom.secretKeyRef for {name}"))
            image = c.get("image")
            if isinstance(image, str):
                why = image_problem(image)
                if why:
                    out.append(m.finding("SEC005", path + ("image",), why))
            res = _sc(c.get("resources"))
            limits = _sc(res.get("limits"))
            missing = [r for r in ("cpu", "memory") if r not in limits]
            if missing:
                out.append(m.finding("SEC006", path + ("resources",),
                                     f"container {cname!r} sets no {' / '.join(missing)} limit",
                                     fix="set resources.limits." + " and ".join(missing)))
    return out
