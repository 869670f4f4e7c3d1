"""Server-side dry run: the API server itself checks every object (admission, CEL rules, webhooks) with
`dryRun=All` and `fieldValidation=Strict` (a server-side apply), persisting nothing. Needs a kubeconfig."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from infra.errors import Location, Problem, ValidationError
from infra.validators.findings import Finding
from infra.validators.manifests import Manifest


def kubeconfig() -> Path | None:
    """The kubeconfig the kubernetes client would read: $KUBECONFIG (first entry), else ~/.kube/config."""
    env = os.environ.get("KUBECONFIG")
    candidates = [Path(p) for p in env.split(os.pathsep) if p] if env else [Path.home() / ".kube" / "config"]
    return next((p for p in candidates if p.is_file()), None)


def client() -> Any:
    """A dynamic client for the current kubeconfig context, or ValidationError saying how to provide one."""
    path = kubeconfig()
    if path is None:
        raise ValidationError(Problem(
            "--live needs a cluster, and no kubeconfig was found ($KUBECONFIG unset or missing, no ~/.kube/config)",
            Location(os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")),
            "point KUBECONFIG at the cluster's kubeconfig (e.g. `export KUBECONFIG=~/.kube/prod.yaml`), or drop "
            "--live to validate offline"))
    from kubernetes import config, dynamic
    from kubernetes.client import ApiClient

    try:
        return dynamic.DynamicClient(ApiClient(configuration=config.new_client_from_config(
            config_file=str(path)).configuration))
    except Exception as exc:  # the client raises many unrelated types for a bad file or an unreachable server
        raise ValidationError(Problem(f"cannot connect with kubeconfig: {exc}", Location(str(path)),
                                      "check the kubeconfig's current context and that the cluster is reachable")
                              ) from None


def dry_run(dyn: Any, manifests: list[Manifest], namespace: str = "default") -> list[Finding]:
    """LIV001 for every object the API server refuses."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError

    out = []
    for m in manifests:
        try:
            resource = dyn.resources.get(api_version=m.api_version, kind=m.kind)
            ns = m.namespace or namespace if resource.namespaced else None
            # Server-side apply works for new and existing objects alike.
            dyn.server_side_apply(resource, body=m.data, name=m.name, namespace=ns, dry_run="All",
                                  field_manager="infra", query_params=[("fieldValidation", "Strict")])
        except ResourceNotFoundError:
            out.append(m.finding("LIV001", ("kind",), f"the API server does not serve {m.api_version} {m.kind}",
                                 fix="install the CRD, or use a version the server serves"))
        except (ApiException, DynamicApiError) as exc:
            body = getattr(exc, "body", None) or str(exc)
            out.append(m.finding("LIV001", ("metadata", "name"), f"API server refused it: {str(body)[:400]}"))
    return out
