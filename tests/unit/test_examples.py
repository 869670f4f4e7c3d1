"""Every bundled example is valid, round-trips through the models, and validates against the JSON Schema."""

from __future__ import annotations

import json

import jsonschema
import pytest
from ruamel.yaml import YAML

from infra import api
from infra.intent.models import ServingIntent
from infra.intent.profile import ClusterProfile
from infra.intent.schema import intent_schema
from infra.perf.correction import schema as calibration_schema

from ..conftest import ROOT, example_intents, example_profiles


def test_enough_examples():
    assert len(example_intents()) >= 8
    assert len(example_profiles()) >= 3


@pytest.mark.parametrize("path", example_intents() + example_profiles(), ids=lambda p: p.name)
def test_example_checks(path):
    result = api.check(path)
    assert result.kind in ("ServingIntent", "ClusterProfile")


@pytest.mark.parametrize("path", example_intents() + example_profiles(), ids=lambda p: p.name)
def test_example_round_trips(path):
    raw = YAML(typ="safe").load(path.read_text())
    cls = ServingIntent if raw["kind"] == "ServingIntent" else ClusterProfile
    model = cls.model_validate(raw)
    dumped = model.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    again = cls.model_validate(dumped)
    assert again == model
    assert again.model_dump(mode="json", by_alias=True) == model.model_dump(mode="json", by_alias=True)


@pytest.mark.parametrize("path", example_intents() + example_profiles(), ids=lambda p: p.name)
def test_schema_accepts_example(path):
    raw = YAML(typ="safe").load(path.read_text())
    jsonschema.validate(raw, intent_schema())


@pytest.mark.parametrize("path", example_intents() + example_profiles(), ids=lambda p: p.name)
def test_examples_point_editors_at_the_schema(path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=")
    target = (path.parent / first.split("=", 1)[1]).resolve()
    assert target == (ROOT / "schema" / "intent.schema.json").resolve()


def test_schema_rejects_what_the_loader_rejects():
    raw = YAML(typ="safe").load((ROOT / "examples" / "chat-mixed-fleet.yaml").read_text())
    raw["spec"]["services"][0]["workload"]["ratee"] = raw["spec"]["services"][0]["workload"].pop("rate")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(raw, intent_schema())


def test_committed_schema_is_current():
    committed = json.loads((ROOT / "schema" / "intent.schema.json").read_text())
    assert committed == json.loads(json.dumps(intent_schema(), sort_keys=True)), \
        "regenerate with `infra schema -o schema/intent.schema.json`"
    committed = json.loads((ROOT / "schema" / "calibration.schema.json").read_text())
    assert committed == json.loads(json.dumps(calibration_schema(), sort_keys=True)), \
        "regenerate with `infra schema --kind calibration -o schema/calibration.schema.json`"


def test_every_field_is_documented():
    schema = intent_schema()
    missing = [f"{name}.{prop}" for name, d in schema["$defs"].items()
               for prop, spec in (d.get("properties") or {}).items() if not spec.get("description")]
    assert not missing, f"fields without a description: {missing}"


def test_normalised_values():
    result = api.check(ROOT / "examples" / "chat-mixed-fleet.yaml")
    svc = result.intent.loaded.intent.spec.services[0]
    assert svc.workload.rate.peak_rps == 40 and svc.workload.rate.baseline_rps == 8
    assert svc.slo.ttft["p99"] == 1.5 and svc.slo.ttft["p50"] == 0.3
    assert svc.budget.per_hour == 90 and svc.max_context == 16000
    assert svc.workload.input_tokens.percentiles["p90"] == 4000
    assert svc.workload.prefix_sharing == 0.35
    assert result.intent.services[0].model.name == "Llama-3.1-70B"
