"""Bad inputs: every mistake a user can make in an intent or a cluster profile is reported cleanly.

Each case mutates a valid base file (a text replacement), runs `infra.api.check` on it and requires:

1. an `InfraError` (never another exception type, never a traceback);
2. every problem rendered as `file:line:col: ... — To fix: ...`, with no library internals in it;
3. the first problem names the right mistake (expected message fragments), in the right file, at the line of the
   offending key or value (found by searching the mutated text for a marker, never hard-coded).

A hypothesis fuzz test then mutates the bases at random: `check` must either accept the file or raise an
`InfraError` whose problems all name the file.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra import api
from infra.errors import InfraError

# --- valid bases ------------------------------------------------------------------------------------------------

HEADER = """\
apiVersion: infra.dev/v1alpha1
kind: ServingIntent
metadata:
  name: bad-inputs-base
  description: Base intent for the bad-input tests
  labels: {team: infra}
spec:
"""

INLINE_CLUSTER = """\
  cluster:
    pools:
      - name: h100-a
        device: H100-SXM
        nodes: 2
        devices_per_node: 8
        price: $2.49/h
        topology: {zone: zone-a, switch: leaf-a1}
        nics:
          - {name: mlx5_0, kind: infiniband, bandwidth: 400Gbps}
        allocatable_memory: 80GiB
      - name: ascend-b
        device: Ascend-910B3
        nodes:
          - {name: atlas-01, topology: {zone: zone-b}}
          - {name: atlas-02, topology: {zone: zone-b}}
        devices_per_node: 4
        price: $1.10/h
        owned: true
    conventions:
      scheduler: hami-scheduler
      namespace: llm-serving
      devices:
        nvidia: {count: nvidia.com/gpu, memory: nvidia.com/gpumem, memory_unit: 1MiB}
      crds:
        leaderworkerset: leaderworkerset.x-k8s.io/v1
"""

MODEL_LINES = """\
      model: Llama-3.1-8B
      precisions: [bf16]
      max_context: 16k
"""

SERVICE_HEAD = """\
  services:
    - name: chat
"""

SERVICE_BODY = """\
      workload:
        rate:
          peak: 40/s
          baseline: 8/s
        arrival:
          process: gamma
          cv: 1.5
        input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}
        output_tokens: {mean: 350, p99: 1.2k}
        prefix_sharing: 35%
      slo:
        ttft: {p50: 300ms, p99: 1.5s}
        tpot: {p99: 60ms}
        e2e: {p99: 60s}
        attainment: 99%
      budget:
        per_hour: $90/h
        per_million_tokens: $1.20/Mtok
        per_request: $0.01
      availability:
        min_replicas: 2
        zones: 2
      preferences:
        frameworks: [vllm, vllm-ascend]
        devices: [H100-SXM, Ascend-910B3]
        disaggregation: auto
        spot: never
        multi_node: true
  budget:
    per_hour: $200/h
"""

PIPELINE_LINES = """\
      pipeline:
        - name: prep
          kind: cpu
          work: {cpu_time: 40ms}
        - name: thinker
          kind: llm
          model: Llama-3.1-8B
          after: [prep]
          precisions: [bf16]
          work:
            input_tokens: {mean: 600, max: 4k}
            output_tokens: {mean: 180, max: 1k}
          handoff: {unit: token, size: 4KiB}
        - name: voice-out
          kind: codec
          model: Qwen3-Omni-Code2Wav
          work: {audio: 15s}
          slo:
            first_output: {p99: 900ms}
"""

INTENT = HEADER + INLINE_CLUSTER + SERVICE_HEAD + MODEL_LINES + SERVICE_BODY
"""A valid intent with an inline cluster and one single-model service."""

PIPELINE = HEADER + INLINE_CLUSTER + SERVICE_HEAD + PIPELINE_LINES + SERVICE_BODY
"""The same intent whose service is a pipeline (cpu -> llm -> codec)."""

REF_INTENT = HEADER + "  cluster:\n    profile: cluster.yaml\n" + SERVICE_HEAD + MODEL_LINES + SERVICE_BODY
"""The same intent with its inventory in a separate cluster profile file, `cluster.yaml`."""

PROFILE = """\
apiVersion: infra.dev/v1alpha1
kind: ClusterProfile
metadata:
  name: bad-inputs-cluster
  description: Base cluster profile for the bad-input tests
spec:
  pools:
    - name: h100-a
      device: H100-SXM
      nodes: 2
      devices_per_node: 8
      price: $2.49/h
      topology: {zone: zone-a, switch: leaf-a1, scale_up_domain: nvl-a}
      nics:
        - {name: mlx5_0, kind: infiniband, bandwidth: 400Gbps}
      node_selector: {node.kubernetes.io/instance-type: hgx-h100}
    - name: ascend-b
      device: Ascend-910B3
      nodes:
        - {name: atlas-01, topology: {zone: zone-b}}
        - {name: atlas-02, topology: {zone: zone-b}}
      devices_per_node: 4
      price: $1.10/h
      owned: true
  conventions:
    scheduler: hami-scheduler
    devices:
      nvidia: {count: nvidia.com/gpu, memory: nvidia.com/gpumem}
    crds:
      volcano: scheduling.volcano.sh/v1beta1
"""
"""A valid cluster profile with the same two pools."""

BIG_MODEL = HEADER + """\
  cluster:
    pools:
      - name: l4-pool
        device: L4
        nodes: 2
        devices_per_node: 8
  services:
    - name: big
      model: meta-llama/Llama-3.1-405B-Instruct
      precisions: [bf16]
      workload:
        rate: 1/s
        input_tokens: 1k
        output_tokens: 100
      preferences:
        multi_node: false
"""
"""Llama-3.1-405B at bf16 (~812 GB of weights) on L4 nodes (8 x 24 GB each), one node per replica."""

BASES = {"intent": INTENT, "pipeline": PIPELINE, "ref": REF_INTENT, "profile": PROFILE, "big": BIG_MODEL}

CONFIG_JSON = """\
{
  "model_type": "llama",
  "num_hidden_layers": 32,
  "hidden_size": 4096,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "intermediate_size": 14336,
  "vocab_size": 128256,
  "max_position_embeddings": 131072
}
"""


# --- case machinery ---------------------------------------------------------------------------------------------

Marker = str | int | tuple[str, int]
"""Where the offending line is: a string found on exactly one line, (string, n) for its n-th line (1-based), or
a line number (only for whole-file cases)."""


@dataclass(frozen=True)
class Case:
    id: str
    edits: tuple[tuple[str, str], ...]
    """(old, new) replacements applied in order to the base text; each `old` must occur exactly once."""
    expect: tuple[str, ...]
    """Fragments the located problem must contain, proving the right mistake was found."""
    at: tuple[Marker, ...]
    """Acceptable places of the problem (any one of them), searched in the text of `where`."""
    base: str = "intent"
    files: dict[str, str | bytes] = field(default_factory=dict)
    """Extra files next to the checked one (a cluster profile, a config.json)."""
    where: str | None = None
    """File the problem must point at; defaults to the checked file."""
    field_path: bool = True
    """Whether the problem must name a field (`file:line:col: field.path: ...`)."""
    path: str | None = None
    """Dotted field path the problem must name (a prefix), where the exact place matters."""
    fix: tuple[str, ...] = ()
    """Fragments the `To fix` part must contain, where the fix itself is what is tested."""

    def main_name(self) -> str:
        return "cluster.yaml" if self.base == "profile" else "intent.yaml"


def case(id: str, old: str | None, new: str | None, expect: str | tuple[str, ...],
         at: Marker | list[Marker] | None = None, *, edits: list[tuple[str, str]] | None = None, **kw) -> Case:
    all_edits = list(edits or [])
    if old is not None:
        all_edits.insert(0, (old, new or ""))
    if at is None:
        assert new, f"{id}: give `at` when the edit deletes text"
        at = next(line.strip() for line in new.splitlines() if line.strip())
    markers = tuple(at) if isinstance(at, list) else (at,)
    fragments = (expect,) if isinstance(expect, str) else tuple(expect)
    return Case(id, tuple(all_edits), fragments, markers, **kw)


def mutate(text: str, edits: tuple[tuple[str, str], ...], case_id: str) -> str:
    for old, new in edits:
        count = text.count(old)
        assert count == 1, f"{case_id}: {old!r} occurs {count} times in the base, expected once"
        text = text.replace(old, new)
    return text


def line_of(text: str, marker: Marker, case_id: str) -> int:
    if isinstance(marker, int):
        return marker
    needle, nth = marker if isinstance(marker, tuple) else (marker, 0)
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    if nth == 0:
        assert len(hits) == 1, f"{case_id}: marker {needle!r} is on lines {hits} of the mutated text, expected one"
        return hits[0]
    assert len(hits) >= nth, f"{case_id}: marker {needle!r} is on lines {hits}, wanted occurrence {nth}"
    return hits[nth - 1]


_INTERNALS = ("TaggedScalar", "CommentedMap", "CommentedSeq", "<unicode string>", "Traceback", "errors.pydantic.dev",
              "input_value=", "[type=")
"""Library internals that must never reach a user's message."""

_LOCATED = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<rest>.*)$", re.S)


def assert_clean_error(exc: InfraError, tmp: Path) -> None:
    """Every problem reads `file:line:col: ... — To fix: ...` with a file under the temporary directory."""
    assert exc.problems, "an InfraError without problems"
    for p in exc.problems:
        text = str(p)
        m = _LOCATED.match(text)
        assert m, f"problem is not `file:line:col: ...`: {text}"
        assert m["file"].startswith(str(tmp)), f"problem names no file of the input: {text}"
        assert " — To fix: " in text, f"problem has no ' — To fix: ': {text}"
        assert not text.rstrip().endswith("To fix:"), f"empty fix: {text}"
        leaked = [w for w in _INTERNALS if w in text]
        assert not leaked, f"problem shows library internals {leaked}: {text}"


def run_case(c: Case, tmp: Path) -> None:
    text = mutate(BASES[c.base], c.edits, c.id)
    main = tmp / c.main_name()
    main.write_text(text, encoding="utf-8")
    texts = {c.main_name(): text}
    if c.base == "ref" and "cluster.yaml" not in c.files:
        (tmp / "cluster.yaml").write_text(PROFILE, encoding="utf-8")
        texts["cluster.yaml"] = PROFILE
    for name, content in c.files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
            texts[name] = content.decode("utf-8", errors="replace")
        else:
            path.write_text(content, encoding="utf-8")
            texts[name] = content
    try:
        api.check(main)
    except InfraError as exc:
        error = exc
    except Exception as exc:  # noqa: BLE001 - any other type is the failure this test exists for
        pytest.fail(f"{c.id}: raised {type(exc).__name__} instead of an InfraError: {exc}")
    else:
        pytest.fail(f"{c.id}: the bad input was accepted")

    rendered = "\n".join(str(p) for p in error.problems)
    assert_clean_error(error, tmp)

    where_name = c.where or c.main_name()
    where = str(tmp / where_name)
    lines = {line_of(texts[where_name], m, c.id) for m in c.at}
    first = error.problems[0]
    text = str(first)
    missing = [f for f in c.expect if f not in text]
    assert not missing, f"{c.id}: the first problem lacks {missing!r}; all problems:\n{rendered}"
    assert text.startswith(where + ":"), f"{c.id}: expected the problem in {where_name}; got:\n{rendered}"
    got_line = first.location.line
    assert got_line in lines, f"{c.id}: expected line {sorted(lines)}, got {got_line}:\n{rendered}"
    assert f"{where}:{got_line}:" in text
    if c.field_path:
        assert first.location.path, f"{c.id}: the problem names no field:\n{text}"
    if c.path:
        assert first.location.path.startswith(c.path), f"{c.id}: expected field {c.path}, got:\n{text}"
    if c.fix:
        fix = text.split(" — To fix: ", 1)[1]
        assert all(f in fix for f in c.fix), f"{c.id}: the fix lacks {c.fix!r}:\n{text}"


# --- the cases --------------------------------------------------------------------------------------------------

CODEC = ("        - name: voice-out\n          kind: codec\n          model: Qwen3-Omni-Code2Wav\n"
         "          work: {audio: 15s}\n")

CASES: list[Case] = [
    # metadata
    case("meta-name-uppercase", "  name: bad-inputs-base", "  name: Bad-Inputs", "is not a valid name"),
    case("meta-name-underscore", "  name: bad-inputs-base", "  name: bad_inputs", ("'bad_inputs' is not a valid name",
                                                                                      "'bad-inputs'")),
    case("meta-name-too-long", "  name: bad-inputs-base", "  name: " + "a" * 70, "is not a valid name"),
    case("meta-name-trailing-dash", "  name: bad-inputs-base", "  name: bad-inputs-", "is not a valid name"),
    case("meta-name-missing", "  name: bad-inputs-base\n", "", "missing required field 'name'", "metadata:"),
    case("meta-unknown-key", "  description: Base", "  descripton: Base",
         ("unknown field 'descripton'", "did you mean 'description'")),
    case("meta-labels-list", "labels: {team: infra}", "labels: [team, infra]", "expected a mapping"),
    case("meta-is-string", "metadata:\n  name: bad-inputs-base\n  description: Base intent for the bad-input tests\n"
         "  labels: {team: infra}\n", "metadata: bad-inputs-base\n", "expected a mapping"),
    # apiVersion / kind / top level
    case("apiversion-wrong", "apiVersion: infra.dev/v1alpha1", "apiVersion: infra.dev/v1",
         "unsupported apiVersion 'infra.dev/v1'"),
    case("apiversion-missing", "apiVersion: infra.dev/v1alpha1\n", "", "missing apiVersion", 1, field_path=False),
    case("kind-typo", "kind: ServingIntent", "kind: ServingIntnet",
         ("unknown kind 'ServingIntnet'", "did you mean 'ServingIntent'")),
    case("kind-missing", "kind: ServingIntent\n", "", "missing kind", 1, field_path=False),
    case("metadata-missing", "metadata:\n  name: bad-inputs-base\n  description: Base intent for the bad-input tests\n"
         "  labels: {team: infra}\n", "", "missing required field 'metadata'", 1),
    case("spec-missing", None, None, "missing required field 'spec'", 1,
         edits=[(INLINE_CLUSTER + SERVICE_HEAD + MODEL_LINES + SERVICE_BODY, ""), ("spec:\n", "")]),
    case("top-level-typo", "spec:\n  cluster:", "metadat: {}\nspec:\n  cluster:",
         ("unknown field 'metadat'", "did you mean 'metadata'"), "metadat: {}"),
    case("spec-key-typo", "  budget:\n    per_hour: $200/h", "  budgt:\n    per_hour: $200/h",
         ("unknown field 'budgt'", "did you mean 'budget'")),
    case("spec-services-typo", "  services:\n", "  servics:\n", "did you mean 'services'", "servics:"),
    case("spec-not-mapping", None, None, "expected a mapping", "spec: [cluster, services]",
         edits=[(INLINE_CLUSTER + SERVICE_HEAD + MODEL_LINES + SERVICE_BODY, ""),
                ("spec:\n", "spec: [cluster, services]\n")]),
    case("service-key-typo", "      max_context: 16k", "      max_contxt: 16k",
         ("unknown field 'max_contxt'", "did you mean 'max_context'")),
    case("non-string-key", "  labels: {team: infra}", "  labels: {team: infra}\n  42: answer",
         "42", "42: answer"),
    # cluster source
    case("cluster-both-profile-and-pools", "  cluster:\n    pools:",
         "  cluster:\n    profile: cluster.yaml\n    pools:",
         "exactly one", ["  cluster:", "profile: cluster.yaml"], files={"cluster.yaml": PROFILE}),
    case("cluster-neither", INLINE_CLUSTER, "  cluster: {}\n", "exactly one"),
    case("cluster-only-conventions", INLINE_CLUSTER, "  cluster: {conventions: {scheduler: volcano}}\n",
         "exactly one"),
    case("cluster-pools-typo", "    pools:\n", "    poolz:\n", ("unknown field 'poolz'", "did you mean 'pools'"),
         "poolz:"),
    case("cluster-profile-missing", "profile: cluster.yaml", "profile: profiles/nope.yaml", "not found",
         base="ref"),
    case("cluster-profile-is-intent", "profile: cluster.yaml", "profile: other-intent.yaml", "ClusterProfile",
         base="ref", files={"other-intent.yaml": INTENT}),
    case("cluster-profile-is-directory", "profile: cluster.yaml", "profile: profiles", "directory",
         base="ref", files={"profiles/readme.txt": "not a profile"}),
    case("cluster-profile-with-inline-conventions", "    profile: cluster.yaml\n",
         "    profile: cluster.yaml\n    conventions: {scheduler: volcano}\n", "move them into the profile",
         ["  cluster:", "profile: cluster.yaml", "conventions: {scheduler: volcano}"], base="ref"),
    case("cluster-profile-not-string", "profile: cluster.yaml", "profile: [cluster.yaml]", "expected a string",
         base="ref"),
    # pools
    case("pool-device-typo", "device: H100-SXM", "device: H100-SMX",
         ("unknown device 'H100-SMX'", "did you mean 'H100-SXM'")),
    case("pool-device-unknown-ascend", "device: Ascend-910B3", "device: Ascend-910B9",
         ("unknown device 'Ascend-910B9'", "did you mean")),
    case("pool-device-missing", "        device: H100-SXM\n", "", "missing required field 'device'",
         "- name: h100-a"),
    case("pool-nodes-zero", "        nodes: 2\n", "        nodes: 0\n", "at least one node"),
    case("pool-nodes-negative", "        nodes: 2\n", "        nodes: -3\n", "at least one node"),
    case("pool-nodes-string", "        nodes: 2\n", "        nodes: two\n", "got 'two'"),
    case("pool-nodes-empty-list", None, None, "empty list", "nodes: []",
         edits=[("        nodes:\n          - {name: atlas-01, topology: {zone: zone-b}}\n"
                 "          - {name: atlas-02, topology: {zone: zone-b}}\n", "        nodes: []\n")]),
    case("pool-duplicate-node-names", "{name: atlas-02,", "{name: atlas-01,", "node names repeat: atlas-01",
         [("atlas-01", 2), ("        nodes:", 2)]),
    case("pool-node-unknown-key", "{name: atlas-02,", "{hostname: atlas-02, name: atlas-03,",
         ("unknown field 'hostname'",), "hostname: atlas-02"),
    case("pool-node-devices-zero", "{name: atlas-02,", "{name: atlas-02, devices: 0,",
         "greater than or equal to 1", "devices: 0"),
    case("pool-duplicate-names", "      - name: ascend-b", "      - name: h100-a", "pool names repeat: h100-a",
         [("name: h100-a", 2), "    pools:"]),
    case("pool-name-uppercase", "      - name: h100-a", "      - name: H100-A", "'H100-A' is not a valid name"),
    case("pool-devices-per-node-zero", "        devices_per_node: 8", "        devices_per_node: 0",
         "greater than or equal to 1"),
    case("pool-devices-per-node-word", "        devices_per_node: 8", "        devices_per_node: eight",
         "expected a whole number, got 'eight'"),
    case("pool-devices-per-node-typo", "        devices_per_node: 8", "        device_per_node: 8",
         ("unknown field 'device_per_node'", "did you mean 'devices_per_node'")),
    case("pool-price-bad-unit", "price: $2.49/h", "price: $2.49/fortnight", "unknown period '/fortnight'"),
    case("pool-price-euro", "price: $2.49/h", "price: €2.49/h", "prices are in US dollars"),
    case("pool-price-word", "price: $2.49/h", "price: cheap", "'cheap' is not a price"),
    case("pool-price-negative", "price: $2.49/h", "price: -2.49", "negative"),
    case("pool-bandwidth-bad-unit", "bandwidth: 400Gbps", "bandwidth: 400Gbits", "unknown bandwidth unit"),
    case("pool-bandwidth-bare-number", "bandwidth: 400Gbps", "bandwidth: 400", "has no unit"),
    case("pool-nic-kind-typo", "kind: infiniband", "kind: infiniban",
         ("'infiniban' is not allowed here", "did you mean 'infiniband'")),
    case("pool-nic-missing-bandwidth", ", bandwidth: 400Gbps}", "}", "missing required field 'bandwidth'",
         "{name: mlx5_0, kind: infiniband}"),
    case("pool-bytes-bad-unit", "allocatable_memory: 80GiB", "allocatable_memory: 80GiBs", "unknown size unit"),
    case("pool-owned-not-bool", "        owned: true", "        owned: maybe", "expected true or false"),
    case("pool-topology-typo", "{zone: zone-a, switch: leaf-a1}", "{zon: zone-a, switch: leaf-a1}",
         ("unknown field 'zon'", "did you mean 'zone'")),
    case("pool-is-string", None, None, "expected a mapping", "- just-a-name",
         edits=[("      - name: ascend-b\n", "      - just-a-name\n      - name: ascend-b\n")]),
    case("pools-empty", None, None, "at least", "pools: []",
         edits=[(INLINE_CLUSTER, "  cluster:\n    pools: []\n")]),
    case("pool-node-selector-list", "        owned: true\n", "        owned: true\n        node_selector: [a, b]\n",
         "expected a mapping", "node_selector: [a, b]"),
    # conventions
    case("conventions-vendor-typo", "        nvidia: {count:", "        nvida: {count:",
         ("'nvida' is not allowed here", "did you mean 'nvidia'")),
    case("conventions-crd-typo", "leaderworkerset: leaderworkerset.x-k8s.io/v1",
         "leaderworkerst: leaderworkerset.x-k8s.io/v1",
         ("unknown field 'leaderworkerst'", "did you mean 'leaderworkerset'")),
    case("conventions-key-typo", "      scheduler: hami-scheduler", "      schedular: hami-scheduler",
         ("unknown field 'schedular'", "did you mean 'scheduler'")),
    case("conventions-devices-missing-count", "{count: nvidia.com/gpu, memory:", "{memory:",
         "missing required field 'count'", "nvidia: {memory:"),
    case("conventions-memory-unit-bad", "memory_unit: 1MiB}", "memory_unit: 1MiBs}", "unknown size unit"),
    # services
    case("services-duplicate-names", "  budget:\n    per_hour: $200/h\n",
         "    - name: chat\n      model: Qwen3-8B\n"
         "      workload: {concurrency: 4, input_tokens: 1k, output_tokens: 100}\n"
         "  budget:\n    per_hour: $200/h\n", "service names repeat: chat", [("- name: chat", 2), "  services:"]),
    case("service-neither-model-nor-pipeline", "      model: Llama-3.1-8B\n", "", "exactly one", "- name: chat"),
    case("service-both-model-and-pipeline", "      max_context: 16k\n",
         "      max_context: 16k\n      pipeline:\n        - {name: x, kind: llm, model: Qwen3-8B}\n",
         "exactly one", ["- name: chat", "pipeline:", "model: Llama-3.1-8B"]),
    case("services-empty-list", SERVICE_HEAD + MODEL_LINES + SERVICE_BODY, "  services: []\n", "at least 1"),
    case("services-mapping", SERVICE_HEAD + MODEL_LINES + SERVICE_BODY, "  services: {name: chat}\n",
         "expected a list"),
    case("service-name-underscore", "    - name: chat", "    - name: chat_bot", "'chat_bot' is not a valid name"),
    case("service-name-missing", "    - name: chat\n      model:", "    - model:", "missing required field 'name'",
         "- model: Llama"),
    case("service-workload-missing", None, None, "missing required field 'workload'", "- name: chat",
         edits=[(SERVICE_BODY, "  budget:\n    per_hour: $200/h\n")]),
    # model
    case("model-unknown-with-suggestion", "model: Llama-3.1-8B", "model: Llama-3.1-8C",
         ("unknown model 'Llama-3.1-8C'", "did you mean", "'Llama-3.1-8B'")),
    case("model-hf-id-typo", "model: Llama-3.1-8B", "model: meta-llama/Llama-3.1-8B-Instrct",
         ("unknown model", "did you mean")),
    case("model-unknown", "model: Llama-3.1-8B", "model: totally-unknown-xyz", "unknown model 'totally-unknown-xyz'"),
    case("model-not-string", "model: Llama-3.1-8B", "model: 42", "expected a string, got 42"),
    case("model-config-json-missing", "model: Llama-3.1-8B", "model: custom/config.json", "not found"),
    case("model-config-json-invalid", "model: Llama-3.1-8B", "model: custom/config.json", "invalid JSON",
         '"hidden_size" 4096', files={"custom/config.json": CONFIG_JSON.replace('"hidden_size": 4096',
                                                                              '"hidden_size" 4096')},
         where="custom/config.json", field_path=False),
    case("model-config-json-missing-field", "model: Llama-3.1-8B", "model: custom/config.json", "num_hidden_layers",
         files={"custom/config.json": CONFIG_JSON.replace('  "num_hidden_layers": 32,\n', "")}),
    case("model-config-json-not-object", "model: Llama-3.1-8B", "model: custom/config.json", "object",
         files={"custom/config.json": "[1, 2, 3]\n"}),
    # precisions
    case("precision-unknown", "      precisions: [bf16]", "      precisions: [bf17]",
         ("'bf17' is not allowed here", "did you mean 'bf16'")),
    case("precision-not-list", "      precisions: [bf16]", "      precisions: {bf16: true}", "expected a list"),
    case("precision-fp8-on-ascend-only", "      precisions: [bf16]", "      precisions: [fp8]",
         ("precisions fp8 run on none", "Ascend-910B3"),
         edits=[("devices: [H100-SXM, Ascend-910B3]", "devices: [Ascend-910B3]")]),
    case("precision-fp8-on-a100-and-ascend", "      precisions: [bf16]", "      precisions: [fp8]",
         ("precisions fp8 run on none", "A100-80G"),
         edits=[("device: H100-SXM", "device: A100-80G"),
                ("devices: [H100-SXM, Ascend-910B3]", "devices: [A100-80G, Ascend-910B3]")]),
    # max_context
    case("max-context-above-model", "max_context: 16k", "max_context: 256k", ("exceeds", "131072")),
    case("max-context-bad-suffix", "max_context: 16k", "max_context: 16 thousand", "unknown suffix 'thousand'"),
    case("max-context-fraction", "max_context: 16k", "max_context: 1.5", "not a whole number"),
    case("max-context-bool", "max_context: 16k", "max_context: true", "boolean"),
    # workload: loop
    case("workload-rate-and-concurrency", "        prefix_sharing: 35%",
         "        prefix_sharing: 35%\n        concurrency: 64", "exactly one",
         ["      workload:", "        rate:", "concurrency: 64"]),
    case("workload-neither-rate-nor-concurrency", "        rate:\n          peak: 40/s\n          baseline: 8/s\n", "",
         "exactly one", "      workload:"),
    case("workload-concurrency-zero", "        rate:\n          peak: 40/s\n          baseline: 8/s\n",
         "        concurrency: 0\n", "greater than or equal to 1",
         edits=[("        arrival:\n          process: gamma\n          cv: 1.5\n", "")]),
    case("workload-concurrency-word", "        rate:\n          peak: 40/s\n          baseline: 8/s\n",
         "        concurrency: many\n", "got 'many'"),
    case("workload-not-mapping", None, None, "expected a mapping", "workload: [rate, concurrency]",
         edits=[("      workload:\n        rate:\n          peak: 40/s\n          baseline: 8/s\n        arrival:\n"
                 "          process: gamma\n          cv: 1.5\n        input_tokens: {mean: 1800, p50: 1200, p99: 9k,"
                 " max: 12k}\n        output_tokens: {mean: 350, p99: 1.2k}\n        prefix_sharing: 35%\n",
                 "      workload: [rate, concurrency]\n")]),
    case("workload-key-typo", "        prefix_sharing: 35%", "        prefix_share: 35%",
         ("unknown field 'prefix_share'", "did you mean 'prefix_sharing'")),
    # workload: rate
    case("rate-bad-unit", "          peak: 40/s", "          peak: 40/fortnight", "unknown rate unit '/fortnight'"),
    case("rate-scalar-bad-unit", "        rate:\n          peak: 40/s\n          baseline: 8/s\n",
         "        rate: 40/fortnight\n", "unknown rate unit '/fortnight'"),
    case("rate-word", "          peak: 40/s", "          peak: fast", "'fast' is not a rate"),
    case("rate-negative", "          baseline: 8/s", "          baseline: -8/s", "negative"),
    case("rate-zero", "        rate:\n          peak: 40/s\n          baseline: 8/s\n", "        rate: 0\n",
         "the peak rate is zero", fix=("peak",)),
    case("rate-baseline-above-peak", "          baseline: 8/s", "          baseline: 80/s", "is above peak",
         ["        rate:", "peak: 40/s", "baseline: 80/s"]),
    case("rate-baseline-only", "          peak: 40/s\n", "", "needs a peak", "        rate:"),
    case("rate-key-typo", "          peak: 40/s", "          peek: 40/s",
         ("unknown field 'peek'", "did you mean 'peak'")),
    case("rate-daily-unsorted", "        rate:\n          peak: 40/s\n          baseline: 8/s\n",
         "        rate:\n          daily:\n            - {at: '12:00', rate: 40/s}\n"
         "            - {at: '08:00', rate: 8/s}\n",
         "increasing time order", ["        rate:", "daily:", "at: '08:00'"]),
    case("rate-daily-bad-time", "        rate:\n          peak: 40/s\n          baseline: 8/s\n",
         "        rate:\n          daily:\n            - {at: '08:00', rate: 8/s}\n"
         "            - {at: '25:00', rate: 40/s}\n",
         "HH:MM", "at: '25:00'"),
    case("rate-daily-empty", "        rate:\n          peak: 40/s\n          baseline: 8/s\n",
         "        rate:\n          daily: []\n", "daily profile is empty", ["        rate:", "daily: []"]),
    case("rate-daily-and-peak", "          baseline: 8/s\n", "          daily: [{at: '08:00', rate: 8/s}]\n",
         "not both", ["        rate:", "daily: [", "peak: 40/s"]),
    # workload: arrival
    case("arrival-gamma-without-cv", "          cv: 1.5\n", "", "add cv", ["        arrival:", "process: gamma"]),
    case("arrival-cv-with-poisson", "          process: gamma", "          process: poisson",
         "cv applies to gamma arrivals only", ["        arrival:", "process: poisson", "cv: 1.5"]),
    case("arrival-process-typo", "          process: gamma", "          process: gama",
         ("'gama' is not allowed here", "did you mean 'gamma'")),
    case("arrival-process-unknown-scalar", "        arrival:\n          process: gamma\n          cv: 1.5\n",
         "        arrival: poison\n", ("'poison' is not allowed here", "did you mean 'poisson'")),
    case("arrival-cv-zero", "          cv: 1.5", "          cv: 0", "greater than 0"),
    case("arrival-cv-infinite", "          cv: 1.5", "          cv: .inf", "finite number"),
    case("arrival-cv-huge", "          cv: 1.5", "          cv: 1e308", "less than or equal to 100"),
    # workload: lengths
    case("input-tokens-missing", "        input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}\n", "",
         "needs input_tokens", ["- name: chat", "      workload:"]),
    case("input-tokens-two-forms", "input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}",
         "input_tokens: {fixed: 2k, mean: 1800}", ("exactly one of", "fixed, mean/percentiles")),
    case("input-tokens-empty", "input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}", "input_tokens: {}",
         "exactly one of"),
    case("input-tokens-trace-and-mean", "input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}",
         "input_tokens: {trace: requests.jsonl, mean: 1800}", ("exactly one of", "trace")),
    case("input-tokens-percentiles-decreasing", "input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}",
         "input_tokens: {mean: 1800, p50: 9k, p99: 1200, max: 12k}", "p99 (1200) is below p50 (9000)"),
    case("input-tokens-max-below-p99", "input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}",
         "input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 4k}", "max (4000) is below"),
    case("input-tokens-min-above-max", "input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}",
         "input_tokens: {mean: 1800, min: 13k, max: 12k}", "min (13000) is above max (12000)"),
    case("input-tokens-percentile-p100", "input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}",
         "input_tokens: {mean: 1800, p100: 9k}", "'p100' is not a percentile"),
    case("input-tokens-histogram-unsorted", "input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}",
         "input_tokens: {histogram: [{le: 2k, weight: 1}, {le: 512, weight: 3}]}", "increasing `le`"),
    case("input-tokens-histogram-negative-weight", "input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}",
         "input_tokens: {histogram: [{le: 512, weight: -1}, {le: 2k, weight: 1}]}", "greater than 0"),
    case("input-tokens-histogram-missing-le", "input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}",
         "input_tokens: {histogram: [{weight: 1}]}", "missing required field 'le'"),
    case("output-tokens-fraction", "output_tokens: {mean: 350, p99: 1.2k}", "output_tokens: {mean: '1.5'}",
         "not a whole number"),
    case("output-tokens-fraction-suffix", "output_tokens: {mean: 350, p99: 1.2k}",
         "output_tokens: {mean: 350, p99: 1.2345k}",
         "not a whole number"),
    case("output-tokens-negative", "output_tokens: {mean: 350, p99: 1.2k}", "output_tokens: -5", "negative"),
    case("output-tokens-list", "output_tokens: {mean: 350, p99: 1.2k}", "output_tokens: [350, 1200]",
         "output_tokens"),
    case("prefix-sharing-above-100", "prefix_sharing: 35%", "prefix_sharing: 120%", "outside 0..1"),
    case("prefix-sharing-word", "prefix_sharing: 35%", "prefix_sharing: lots", "'lots' is not a fraction"),
    case("prefix-sharing-bad-unit", "prefix_sharing: 35%", "prefix_sharing: 35 percent", "write a fraction"),
    case("prefix-sharing-all", "prefix_sharing: 35%", "prefix_sharing: 100%", "no prompt token to compute"),
    case("input-tokens-zero", "input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}", "input_tokens: 0",
         "at least 1 token"),
    case("output-tokens-mean-zero", "output_tokens: {mean: 350, p99: 1.2k}", "output_tokens: {mean: 0, p99: 1.2k}",
         "at least 1 token"),
    case("slo-zero-target", "ttft: {p50: 300ms, p99: 1.5s}", "ttft: {p50: 0ms, p99: 1.5s}", "above zero"),
    case("max-context-zero", "      max_context: 16k", "      max_context: 0", "holds no prompt and answer"),
    case("attainment-zero", "attainment: 99%", "attainment: 0%", "asks nothing of any request"),
    case("rate-beyond-any-service", "peak: 40/s", "peak: 1e308/s", "split the traffic"),
    # slo
    case("slo-bare-number", "ttft: {p50: 300ms, p99: 1.5s}", "ttft: {p50: 300, p99: 1.5s}", "300 has no unit"),
    case("slo-unknown-unit", "ttft: {p50: 300ms, p99: 1.5s}", "ttft: {p50: 300msec, p99: 1.5s}",
         "unknown time unit 'msec'"),
    case("slo-percentile-p100", "tpot: {p99: 60ms}", "tpot: {p100: 60ms}", "'p100' is neither mean nor a percentile"),
    case("slo-percentile-q99", "tpot: {p99: 60ms}", "tpot: {q99: 60ms}", "'q99' is neither mean nor a percentile"),
    case("slo-p99-below-p50", "ttft: {p50: 300ms, p99: 1.5s}", "ttft: {p50: 300ms, p99: 200ms}",
         "ttft.p99 (200ms) is below ttft.p50 (300ms)", path="spec.services[0].slo.ttft"),
    case("slo-e2e-p99-below-p50", "e2e: {p99: 60s}", "e2e: {p50: 90s, p99: 60s}",
         "e2e.p99 (60s) is below e2e.p50 (90s)",
         path="spec.services[0].slo.e2e"),
    case("slo-tpot-p99-below-p50", "tpot: {p99: 60ms}", "tpot: {p50: 80ms, p99: 60ms}",
         "tpot.p99 (60ms) is below tpot.p50 (80ms)", path="spec.services[0].slo.tpot"),
    case("slo-tpot-above-e2e", "tpot: {p99: 60ms}", "tpot: {p99: 90s}", "exceeds every e2e target",
         ["tpot: {p99: 90s}", "      slo:"]),
    case("slo-scalar-ttft", "ttft: {p50: 300ms, p99: 1.5s}", "ttft: 300ms", ("ttft needs a percentile", "p99: 300ms")),
    case("slo-attainment-2", "attainment: 99%", "attainment: 2", "outside 0..1"),
    case("slo-confidence-99", "attainment: 99%", "attainment: 99%\n        confidence: 99%",
         "outside 0.5..0.95", "confidence: 99%"),
    case("slo-key-typo", "        tpot: {p99: 60ms}", "        tpt: {p99: 60ms}",
         ("unknown field 'tpt'", "did you mean 'tpot'")),
    case("slo-negative-duration", "tpot: {p99: 60ms}", "tpot: {p99: -60ms}", "negative"),
    case("slo-bool-duration", "tpot: {p99: 60ms}", "tpot: {p99: true}", "boolean"),
    # budget
    case("budget-unknown-key", "        per_hour: $90/h", "        per_hr: $90/h",
         ("unknown field 'per_hr'", "did you mean 'per_hour'")),
    case("budget-bad-period", "        per_hour: $90/h", "        per_hour: $90/week", "unknown period '/week'"),
    case("budget-bad-token-unit", "per_million_tokens: $1.20/Mtok", "per_million_tokens: $1.20/Gtok",
         "unknown unit '/Gtok'"),
    case("budget-per-request-bad-unit", "per_request: $0.01", "per_request: $0.01/min", "unknown unit '/min'"),
    case("budget-yen", "        per_hour: $90/h", "        per_hour: ¥600/h", "prices are in US dollars"),
    case("spec-budget-bad-period", "    per_hour: $200/h", "    per_hour: $200/week", "unknown period '/week'"),
    case("spec-budget-unknown-key", "    per_hour: $200/h", "    per_hours: $200/h",
         ("unknown field 'per_hours'", "did you mean 'per_hour'")),
    # availability
    case("availability-min-replicas-zero", "min_replicas: 2", "min_replicas: 0", "greater than or equal to 1"),
    case("availability-min-replicas-word", "min_replicas: 2", "min_replicas: two",
         "expected a whole number, got 'two'"),
    case("availability-zones-above-inventory", "zones: 2", "zones: 3", ("availability.zones is 3", "2 labelled")),
    case("availability-zones-one-zone-inventory", None, None, ("availability.zones is 2", "1 labelled"), "zones: 2",
         edits=[("{name: atlas-01, topology: {zone: zone-b}}", "{name: atlas-01, topology: {zone: zone-a}}"),
                ("{name: atlas-02, topology: {zone: zone-b}}", "{name: atlas-02, topology: {zone: zone-a}}")]),
    case("availability-key-typo", "        min_replicas: 2", "        replicas: 2",
         ("unknown field 'replicas'", "did you mean 'min_replicas'")),
    # preferences
    case("prefs-framework-typo", "frameworks: [vllm, vllm-ascend]", "frameworks: [vlm, vllm-ascend]",
         ("unknown framework 'vlm'", "did you mean 'vllm'")),
    case("prefs-framework-not-list", "frameworks: [vllm, vllm-ascend]", "frameworks: {vllm: true}",
         "expected a list"),
    case("prefs-frameworks-none-fit", "frameworks: [vllm, vllm-ascend]", "frameworks: [mindie]",
         "none of the frameworks", ["      preferences:", "frameworks: [mindie]", "devices: [H100-SXM]"],
         edits=[("devices: [H100-SXM, Ascend-910B3]", "devices: [H100-SXM]")]),
    case("prefs-device-typo", "devices: [H100-SXM, Ascend-910B3]", "devices: [H100-SMX, Ascend-910B3]",
         ("unknown device 'H100-SMX'", "did you mean 'H100-SXM'")),
    case("prefs-device-not-in-inventory", "devices: [H100-SXM, Ascend-910B3]", "devices: [H200]",
         ("device H200", "no pool of the inventory has it")),
    case("prefs-disaggregation-maybe", "disaggregation: auto", "disaggregation: maybe", "'maybe' is not allowed here"),
    case("prefs-spot-sometimes", "spot: never", "spot: sometimes", "'sometimes' is not allowed here"),
    case("prefs-multi-node-word", "multi_node: true", "multi_node: perhaps", "expected true or false"),
    case("prefs-key-typo", "        frameworks: [vllm, vllm-ascend]", "        framework: [vllm, vllm-ascend]",
         ("unknown field 'framework'", "did you mean 'frameworks'")),
    # pipeline stages
    case("stage-kind-unknown", "          kind: codec", "          kind: tts", "'tts' is not allowed here",
         base="pipeline"),
    case("stage-kind-typo", "          kind: codec", "          kind: codek",
         ("'codek' is not allowed here", "did you mean 'codec'"), base="pipeline"),
    case("stage-llm-without-model", "          model: Llama-3.1-8B\n", "", "needs a model", "- name: thinker",
         base="pipeline"),
    case("stage-cpu-with-model", "          kind: cpu\n", "          kind: cpu\n          model: Qwen3-8B\n",
         "a cpu stage runs no model", ["- name: prep", "model: Qwen3-8B"], base="pipeline"),
    case("stage-cpu-without-cpu-time", "          work: {cpu_time: 40ms}\n", "", "work.cpu_time", "- name: prep",
         base="pipeline"),
    case("stage-codec-without-audio", "          work: {audio: 15s}\n", "", "work.audio", "- name: voice-out",
         base="pipeline"),
    case("stage-dit-without-denoise-steps", CODEC,
         CODEC + "        - name: video\n          kind: dit\n          model: Wan2.1-T2V-14B\n"
         "          work: {video_frames: 81, resolution: 1280x720}\n", "work.denoise_steps",
         ["- name: video", "work: {video_frames: 81"], base="pipeline"),
    case("stage-duplicate-names", "        - name: voice-out", "        - name: thinker",
         "stage names repeat: thinker", [("- name: thinker", 2), "      pipeline:"], base="pipeline"),
    case("stage-after-unknown", "after: [prep]", "after: [prepare]", ("'prepare'", "it is not a stage"),
         ["after: [prepare]", "- name: thinker"], base="pipeline"),
    case("stage-after-later", "after: [prep]", "after: [voice-out]", ("'voice-out'", "it comes later"),
         ["after: [voice-out]", "- name: thinker"], base="pipeline"),
    case("stage-image-on-a-model-stage", "          work: {audio: 15s}", "          work: {audio: 15s}\n          image: x/y:1",
         "image, command and port are for cpu stages", "- name: voice-out", base="pipeline"),
    case("stage-consumed-twice", "          work: {audio: 15s}", "          after: [prep]\n          work: {audio: 15s}",
         ("consumes 'prep', whose output already goes to 'thinker'", "hands on to one stage"),
         [("after: [prep]", 2), "- name: voice-out"], base="pipeline"),
    case("stage-feeds-nothing", "          work: {audio: 15s}", "          after: []\n          work: {audio: 15s}",
         ("stage 'thinker' hands its output to no stage",), "- name: thinker", base="pipeline"),
    case("stage-bad-resolution", CODEC,
         CODEC + "        - name: video\n          kind: dit\n          model: Wan2.1-T2V-14B\n"
         "          work: {video_frames: 81, resolution: 1280*720, denoise_steps: 40}\n", "WIDTHxHEIGHT",
         "resolution: 1280*720", base="pipeline"),
    case("stage-model-typo", "model: Qwen3-Omni-Code2Wav", "model: Qwen3-Omni-Code2Wave",
         ("unknown model 'Qwen3-Omni-Code2Wave'", "did you mean 'Qwen3-Omni-Code2Wav'"), base="pipeline"),
    case("stage-key-typo", "          handoff: {unit: token", "          handof: {unit: token",
         ("unknown field 'handof'", "did you mean 'handoff'"), base="pipeline"),
    case("stage-handoff-unit-typo", "handoff: {unit: token,", "handoff: {unit: tokens,",
         ("'tokens' is not allowed here", "did you mean 'token'"), base="pipeline"),
    case("stage-handoff-bad-size", "size: 4KiB}", "size: 4KiBs}", "unknown size unit", base="pipeline"),
    case("stage-name-uppercase", "        - name: prep", "        - name: Prep", "'Prep' is not a valid name",
         base="pipeline"),
    case("stage-precision-typo", "          precisions: [bf16]", "          precisions: [fp9]",
         ("'fp9' is not allowed here", "did you mean"), base="pipeline"),
    case("stage-slo-bare-number", "first_output: {p99: 900ms}", "first_output: {p99: 900}", "900 has no unit",
         base="pipeline"),
    case("stage-work-images-zero", "work: {cpu_time: 40ms}", "work: {cpu_time: 40ms, images: 0}", "greater than 0",
         base="pipeline"),
    case("pipeline-empty", PIPELINE_LINES, "      pipeline: []\n", "pipeline is empty",
         ["- name: chat", "pipeline: []"], base="pipeline"),
    # the model fits nowhere
    case("model-too-big-one-node", "model: meta-llama/Llama-3.1-405B-Instruct",
         "model: meta-llama/Llama-3.1-405B-Instruct", ("for its weights alone", "8 x L4"), base="big"),
    case("model-too-big-two-nodes", "        multi_node: false", "        multi_node: true",
         ("for its weights alone", "16 x L4"), "model: meta-llama/Llama-3.1-405B-Instruct", base="big"),
    # YAML syntax
    case("yaml-bad-indentation", "      precisions: [bf16]", "       precisions: [bf16]", "YAML syntax error",
         field_path=False),
    case("yaml-unclosed-bracket", "      precisions: [bf16]", "      precisions: [bf16", "YAML syntax error",
         ["precisions: [bf16", "max_context: 16k"], field_path=False),
    case("yaml-tab-indentation", "      precisions: [bf16]", "\tprecisions: [bf16]", "YAML syntax error",
         "precisions: [bf16]", field_path=False),
    case("yaml-tab-after-key", "      precisions: [bf16]", "      precisions:\t[bf16]\n      \tmax: 1",
         "YAML syntax error", ["\tmax: 1", "precisions:\t[bf16]"], field_path=False),
    case("yaml-colon-in-value", "  description: Base intent for the bad-input tests",
         "  description: Base intent: for the bad-input tests", "YAML syntax error", field_path=False),
    case("yaml-unclosed-quote", "  description: Base intent for the bad-input tests",
         "  description: \"Base intent for the bad-input tests", "YAML syntax error",
         ['description: "Base', "labels: {team: infra}"], field_path=False),
    case("yaml-duplicate-key", "      max_context: 16k", "      max_context: 16k\n      model: Qwen3-8B",
         "duplicate key 'model'", "model: Qwen3-8B", field_path=False),
    case("yaml-undefined-alias", "model: Llama-3.1-8B", "model: *llama", "YAML syntax error", field_path=False),
    case("yaml-tag-int-bad", "        nodes: 2\n", "        nodes: !!int two\n", "two", field_path=False),
    case("yaml-tag-int-empty", "        zones: 2", "        zones: !!int ", "int", "zones: !!int", field_path=False),
    case("yaml-tag-float-bad", "          cv: 1.5", "          cv: !!float high", "high", field_path=False),
    case("yaml-tag-bool-bad", "multi_node: true", "multi_node: !!bool perhaps", "perhaps", field_path=False),
    case("yaml-custom-tag", "model: Llama-3.1-8B", "model: !secret Llama-3.1-8B", "!secret"),
    case("yaml-nested-complex-key", "  labels: {team: infra}\n", "  labels: {team: infra}\n  ? {a: {b: 1}}\n  : x\n",
         "key", "? {a: {b: 1}}", field_path=False),
    case("yaml-nul-byte", "  description: Base intent for the bad-input tests",
         "  description: Base\x00 intent", "YAML syntax error", "description: Base", field_path=False),
    # cluster profile files checked on their own
    case("profile-spec-missing", PROFILE[PROFILE.index("spec:\n"):], "", "missing required field 'spec'", 1,
         base="profile"),
    case("profile-kind-typo", "kind: ClusterProfile", "kind: ClusterProfil",
         ("unknown kind 'ClusterProfil'", "did you mean 'ClusterProfile'"), base="profile"),
    case("profile-apiversion-wrong", "apiVersion: infra.dev/v1alpha1", "apiVersion: infra.dev/v2",
         "unsupported apiVersion", base="profile"),
    case("profile-device-typo", "device: H100-SXM", "device: H100-SMX",
         ("unknown device 'H100-SMX'", "did you mean 'H100-SXM'"), base="profile"),
    case("profile-device-unknown", "device: Ascend-910B3", "device: Ascend-999", "unknown device 'Ascend-999'",
         base="profile"),
    case("profile-nodes-zero", "      nodes: 2\n", "      nodes: 0\n", "at least one node", base="profile"),
    case("profile-pools-empty", None, None, "at least 1", "pools: []", base="profile",
         edits=[(PROFILE[PROFILE.index("  pools:\n"):PROFILE.index("  conventions:\n")], "  pools: []\n")]),
    case("profile-duplicate-pools", "    - name: ascend-b", "    - name: h100-a", "pool names repeat: h100-a",
         [("name: h100-a", 2), "  pools:"], base="profile"),
    case("profile-spec-typo", "  pools:\n", "  pool:\n", "did you mean 'pools'", "pool:", base="profile"),
    case("profile-with-services", "  conventions:\n", "  services: []\n  conventions:\n",
         "unknown field 'services'", base="profile"),
    case("profile-vendor-typo", "      nvidia: {count:", "      nvidea: {count:",
         ("'nvidea' is not allowed here", "did you mean 'nvidia'"), base="profile"),
    case("profile-crd-typo", "      volcano: scheduling", "      volcan: scheduling",
         ("unknown field 'volcan'", "did you mean 'volcano'"), base="profile"),
    case("profile-name-underscore", "  name: bad-inputs-cluster", "  name: bad_inputs_cluster",
         "is not a valid name", base="profile"),
    case("profile-pool-missing-device", "      device: H100-SXM\n", "", "missing required field 'device'",
         "- name: h100-a", base="profile"),
    case("profile-bandwidth-bad", "bandwidth: 400Gbps", "bandwidth: fast", "'fast' is not a bandwidth",
         base="profile"),
    case("profile-price-euro", "price: $1.10/h", "price: €1.10/h", "prices are in US dollars", base="profile"),
    case("profile-topology-typo", "scale_up_domain: nvl-a", "scale_up_domian: nvl-a",
         ("unknown field 'scale_up_domian'", "did you mean 'scale_up_domain'"), base="profile"),
    case("profile-node-unknown-key", "{name: atlas-02,", "{name: atlas-02, gpus: 8,", "unknown field 'gpus'",
         "gpus: 8", base="profile"),
    case("profile-duplicate-key", "      owned: true", "      owned: true\n      owned: false",
         "duplicate key 'owned'", "owned: false", base="profile", field_path=False),
    case("profile-is-intent-kind", "kind: ClusterProfile", "kind: ServingIntent", "missing required field 'cluster'",
         "spec:", base="profile"),
    # intents whose referenced profile is wrong: the problem points into the profile
    case("ref-profile-nodes-zero", "profile: cluster.yaml", "profile: cluster.yaml", "at least one node",
         "nodes: 0", base="ref", where="cluster.yaml",
         files={"cluster.yaml": PROFILE.replace("      nodes: 2\n", "      nodes: 0\n")}),
    case("ref-profile-device-typo", "profile: cluster.yaml", "profile: cluster.yaml",
         ("unknown device 'H100-SMX'", "did you mean 'H100-SXM'"), "device: H100-SMX", base="ref",
         where="cluster.yaml", files={"cluster.yaml": PROFILE.replace("device: H100-SXM", "device: H100-SMX")}),
    case("ref-profile-zones", "zones: 2", "zones: 3", "availability.zones is 3", base="ref"),
    case("ref-profile-syntax-error", "profile: cluster.yaml", "profile: cluster.yaml", "YAML syntax error",
         ["devices_per_node 8", "price: $2.49/h"], base="ref", where="cluster.yaml", field_path=False,
         files={"cluster.yaml": PROFILE.replace("      devices_per_node: 8", "      devices_per_node 8")}),
    case("ref-profile-empty", "profile: cluster.yaml", "profile: cluster.yaml", "empty", 1, base="ref",
         where="cluster.yaml", field_path=False, files={"cluster.yaml": "# nothing here\n"}),
]


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_bad_input(c: Case, tmp_path: Path) -> None:
    run_case(c, tmp_path)


# --- whole-file cases -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WholeFile:
    id: str
    content: str | bytes | None
    """Written as intent.yaml; None writes nothing (missing file); "<dir>" makes a directory."""
    expect: str
    lines: tuple[int | str, ...] = (1,)


WHOLE_FILES = [
    WholeFile("empty-file", "", "file is empty"),
    WholeFile("only-comments", "# nothing\n# here\n", "file is empty"),
    WholeFile("top-level-list", "- apiVersion: infra.dev/v1alpha1\n- kind: ServingIntent\n", "expected a mapping"),
    WholeFile("top-level-scalar", "hello\n", "expected a mapping"),
    WholeFile("two-documents", INTENT + "---\n" + INTENT, "2 YAML documents", (1, "---")),
    WholeFile("missing-file", None, "not found"),
    WholeFile("path-is-directory", "<dir>", "directory"),
    WholeFile("non-utf8-bytes", INTENT.replace("Base intent", "Base \xff intent").encode("latin-1"), "not UTF-8",
              (1, "Base \ufffd intent")),
    WholeFile("surrogate-escape", INTENT.replace("  description: Base intent", '  description: "\\ud800 Base intent'
              ).replace("bad-input tests\n", 'bad-input tests"\n', 1), "surrogate escape", ("ud800",)),
    WholeFile("surrogate-escape-in-a-key", INTENT + '"\\udfff": 1\n', "surrogate escape", ("udfff",)),
    WholeFile("yaml-unclosed-flow-mapping-at-end", INTENT + "extra: {a: 1\n", "YAML syntax error",
              ("extra: {a: 1", len(INTENT.splitlines()) + 2)),
]


@pytest.mark.parametrize("w", WHOLE_FILES, ids=[w.id for w in WHOLE_FILES])
def test_bad_whole_file(w: WholeFile, tmp_path: Path) -> None:
    path = tmp_path / "intent.yaml"
    text = ""
    if w.content == "<dir>":
        path.mkdir()
    elif isinstance(w.content, bytes):
        path.write_bytes(w.content)
        text = w.content.decode("utf-8", errors="replace")
    elif w.content is not None:
        path.write_text(w.content, encoding="utf-8")
        text = w.content
    try:
        api.check(path)
    except InfraError as exc:
        error = exc
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"{w.id}: raised {type(exc).__name__} instead of an InfraError: {exc}")
    else:
        pytest.fail(f"{w.id}: the bad input was accepted")
    assert_clean_error(error, tmp_path)
    best = error.problems[0]
    assert w.expect in str(best), f"{w.id}: the first problem lacks {w.expect!r}: {error}"
    lines = {line_of(text, m, w.id) if isinstance(m, str) else m for m in w.lines}
    assert str(best).startswith(str(path) + ":")
    assert best.location.line in lines, f"{w.id}: expected line {sorted(lines)}, got {best.location.line}: {best}"


# --- positive controls: the bases and a few accepted spellings are valid -----------------------------------------


@pytest.mark.parametrize("name", sorted(n for n in BASES if n != "big"))
def test_bases_are_valid(name: str, tmp_path: Path) -> None:
    main = tmp_path / ("cluster.yaml" if name == "profile" else "intent.yaml")
    main.write_text(BASES[name], encoding="utf-8")
    if name == "ref":
        (tmp_path / "cluster.yaml").write_text(PROFILE, encoding="utf-8")
    api.check(main)


def test_big_model_base_fits_with_fp8_and_multi_node(tmp_path: Path) -> None:
    """The too-big cases fail for their size, not for something else: with room enough the intent is valid."""
    text = BIG_MODEL.replace("nodes: 2", "nodes: 8").replace("multi_node: false", "multi_node: true")
    (tmp_path / "intent.yaml").write_text(text, encoding="utf-8")
    api.check(tmp_path / "intent.yaml")


@pytest.mark.parametrize("old,new", [
    ("        rate:\n          peak: 40/s\n          baseline: 8/s\n", "        rate: 40\n"),
    ("        rate:\n          peak: 40/s\n          baseline: 8/s\n", "        rate: 2400/min\n"),
    ("        rate:\n          peak: 40/s\n          baseline: 8/s\n", "        rate: 40rps\n"),
    ("        rate:\n          peak: 40/s\n          baseline: 8/s\n",
     "        rate:\n          daily:\n            - {at: '08:00', rate: 8/s}\n"
     "            - {at: '12:00', rate: 40/s}\n"),
    ("prefix_sharing: 35%", "prefix_sharing: 0.35"),
    ("max_context: 16k", "max_context: 16Ki"),
    ("input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}", "input_tokens: 2k"),
    ("input_tokens: {mean: 1800, p50: 1200, p99: 9k, max: 12k}",
     "input_tokens: {histogram: [{le: 512, weight: 3}, {le: 2k, weight: 1}]}"),
    ("price: $2.49/h", "price: $1800/month"),
    ("disaggregation: auto", "disaggregation: false"),
    ("model: Llama-3.1-8B", "model: meta-llama/Llama-3.1-8B-Instruct"),
])
def test_accepted_spellings(old: str, new: str, tmp_path: Path) -> None:
    (tmp_path / "intent.yaml").write_text(mutate(INTENT, ((old, new),), new), encoding="utf-8")
    api.check(tmp_path / "intent.yaml")


def test_config_json_model_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "custom").mkdir()
    (tmp_path / "custom" / "config.json").write_text(CONFIG_JSON, encoding="utf-8")
    (tmp_path / "intent.yaml").write_text(INTENT.replace("model: Llama-3.1-8B", "model: custom/config.json"),
                                          encoding="utf-8")
    api.check(tmp_path / "intent.yaml")


def test_enough_distinct_cases() -> None:
    ids = [c.id for c in CASES] + [w.id for w in WHOLE_FILES]
    assert len(ids) == len(set(ids)), "case ids repeat"
    inputs = {(c.base, c.edits, tuple(sorted((k, str(v)) for k, v in c.files.items()))) for c in CASES}
    assert len(inputs) + len(WHOLE_FILES) >= 110


# --- fuzz ---------------------------------------------------------------------------------------------------------

TOKENS = [": ", "- ", "{", "}", "[", "]", "p99", "p100", "-1", "0", "1.5", "true", "null", "~", "\t", "#", "'", '"',
          "&a ", "*a", "!!int ", "|", ">", ",", "?", "%", "$", "/s", "ms", "k", "Ki", "\n", "  ", "---\n", "...",
          "model", "nodes", "zones", "rate", "ttft", "pipeline", "profile", "pools", "kind", "cv", "max", "le",
          "concurrency: 4", "after: [x]", "daily: []", "€", "\u00e9", "1e999", "nan", ".inf", "@", "`"]
KEYS = ["model", "nodes", "zones", "rate", "peak", "ttft", "pipeline", "profile", "pools", "kind", "cv", "max",
        "frameworks", "devices", "spot", "foo", "apiVersion", "metadata", "spec", "services", "budget", "slo"]

_ops = st.one_of(
    st.tuples(st.just("delete_char"), st.integers(0, 10_000)),
    st.tuples(st.just("delete_line"), st.integers(0, 10_000)),
    st.tuples(st.just("duplicate_line"), st.integers(0, 10_000)),
    st.tuples(st.just("insert_token"), st.integers(0, 10_000), st.sampled_from(TOKENS)),
    st.tuples(st.just("insert_key"), st.integers(0, 10_000), st.sampled_from(KEYS), st.sampled_from(TOKENS)),
    st.tuples(st.just("indent"), st.integers(0, 10_000), st.integers(-4, 4)),
    st.tuples(st.just("replace_value"), st.integers(0, 10_000), st.sampled_from(TOKENS)),
    st.tuples(st.just("swap_lines"), st.integers(0, 10_000), st.integers(0, 10_000)),
)


def _apply(text: str, op: tuple) -> str:
    kind = op[0]
    lines = text.split("\n")
    n = len(lines)
    if kind == "delete_char":
        if not text:
            return text
        i = op[1] % len(text)
        return text[:i] + text[i + 1:]
    if kind == "insert_token":
        i = op[1] % (len(text) + 1)
        return text[:i] + op[2] + text[i:]
    i = op[1] % n
    if kind == "delete_line":
        return "\n".join(lines[:i] + lines[i + 1:])
    if kind == "duplicate_line":
        return "\n".join(lines[:i + 1] + [lines[i]] + lines[i + 1:])
    if kind == "insert_key":
        indent = len(lines[i]) - len(lines[i].lstrip(" "))
        return "\n".join(lines[:i] + [" " * indent + f"{op[2]}: {op[3]}"] + lines[i:])
    if kind == "indent":
        line = lines[i]
        lines[i] = " " * op[2] + line if op[2] >= 0 else line[min(-op[2], len(line) - len(line.lstrip(" "))):]
        return "\n".join(lines)
    if kind == "replace_value":
        line = lines[i]
        if ": " in line:
            lines[i] = line.split(": ", 1)[0] + ": " + op[2]
        return "\n".join(lines)
    if kind == "swap_lines":
        j = op[2] % n
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    raise AssertionError(kind)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(["intent", "pipeline", "profile", "ref"]), ops=st.lists(_ops, min_size=1, max_size=4))
def test_fuzz_mutations_fail_cleanly(base: str, ops: list[tuple]) -> None:
    text = BASES[base]
    for op in ops:
        text = _apply(text, op)
    with tempfile.TemporaryDirectory(prefix="infra-fuzz-") as tmp:
        folder = Path(tmp)
        path = folder / ("cluster.yaml" if base == "profile" else "intent.yaml")
        path.write_text(text, encoding="utf-8")
        if base == "ref":
            (folder / "cluster.yaml").write_text(PROFILE, encoding="utf-8")
        try:
            api.check(path)
        except InfraError as exc:
            assert exc.problems
            for p in exc.problems:
                shown = str(p)
                assert str(folder) in shown, f"problem names no input file: {shown!r}\n--- input:\n{text}"
                assert " — To fix: " in shown or "error" in shown.lower(), f"problem without a fix: {shown!r}"
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"{type(exc).__name__}: {exc}\n--- input:\n{text}")
