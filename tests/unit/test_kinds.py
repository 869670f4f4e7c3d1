"""The Kubernetes kinds table (infra.catalog.kinds) against what the renderer writes and the profile declares."""

from __future__ import annotations

from pathlib import Path

from ruamel.yaml import YAML

from infra.catalog.kinds import KINDS, NONE, api_group, kind_of
from infra.intent.profile import Crds

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def test_every_rendered_kind_is_in_the_table_under_its_group():
    yaml = YAML(typ="safe")
    seen = set()
    for path in sorted(GOLDEN.rglob("manifests/**/*.yaml")):
        for doc in yaml.load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") and doc.get("apiVersion") and doc["kind"] != "Kustomization":
                seen.add((doc["kind"], doc["apiVersion"]))
    assert len(seen) > 5
    missing = sorted(f"{k} ({v})" for k, v in seen if kind_of(k, v).group != api_group(v) or kind_of(k, v) is NONE)
    assert not missing, f"rendered kinds the table does not know: {missing}"


def test_every_custom_resource_names_a_profile_crd_key():
    keys = set(Crds.model_fields)
    assert {k.crd for k in KINDS if k.crd} <= keys


def test_a_kind_is_read_in_its_own_group():
    assert kind_of("Job", "batch/v1").pods == "template"
    assert kind_of("Job", "batch.volcano.sh/v1alpha1").pods == "tasks"
    # a kind of an unknown group means the one of that name first listed; the group says it did not match
    old = kind_of("Deployment", "extensions/v1beta1")
    assert old.pods == "template" and old.group == "apps"
    assert kind_of("Widget", "example.com/v1") is NONE
    assert [k.name for k in KINDS if k.groups] == ["LeaderWorkerSet", "DisaggregatedSet"]
