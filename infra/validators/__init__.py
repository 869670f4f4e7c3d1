"""Manifest validation: schema (Kubernetes strict + pinned CRD schemas), kustomize, semantic, security, cluster
profile and plan consistency rules, and an optional server-side dry run. Every rule has an id, a severity and a
fix (`infra.validators.rules.RULES`)."""

from infra.validators.findings import Finding, Report
from infra.validators.run import validate_tree

__all__ = ["Finding", "Report", "validate_tree"]
