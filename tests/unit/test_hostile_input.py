"""Hostile and extreme input: each case is a mutation `benchmarks/fuzz.py` found to crash, hang or mislead, now
refused with a located one-line error (or, for the fuzzer itself, its verdicts pinned down)."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from infra import api
from infra.catalog.loader import Catalog
from infra.errors import CatalogError, InfraError, IntentError
from infra.intent.units import parse_count, parse_duration, parse_money_per_hour
from infra.intent.yamlio import load_yaml, read_text
from infra.limits import MAX_DEPTH, check_tree, clip, loads_json, read_limited, shown

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import fuzz  # noqa: E402

LOCATED = re.compile(r"^\S+:\d+(:\d+)?: ")

INTENT = """\
apiVersion: infra.dev/v1alpha1
kind: ServingIntent
metadata:
  name: hostile
spec:
  cluster:
    profile: PROFILE
  services:
    - name: chat
      model: Llama-3.1-8B-Instruct
      workload:
        rate: 5/s
        input_tokens: {mean: 1000, max: 4k}
        output_tokens: {mean: 200, max: 1k}
      slo:
        ttft: {p99: 2s}
        tpot: {p99: 100ms}
"""

PROFILE = """\
apiVersion: infra.dev/v1alpha1
kind: ClusterProfile
metadata:
  name: lab
spec:
  pools:
    - name: h100
      device: H100-SXM
      nodes: NODES
      devices_per_node: 8
      price: PRICE
      node_selector: {SELECTOR}
  conventions:
    devices:
      nvidia: {count: COUNT}
"""

BOMB = "".join(f"x{i}: &a{i} [{', '.join([f'*a{i - 1}' if i else 'lol'] * 9)}]\n" for i in range(9))


def _profile(tmp_path: Path, nodes: str = "2", price: str = "$2/h", selector: str = "",
             count: str = "nvidia.com/gpu") -> Path:
    text = PROFILE.replace("NODES", nodes).replace("PRICE", price).replace("SELECTOR", selector)
    (tmp_path / "profile.yaml").write_text(text.replace("COUNT", count))
    return tmp_path / "profile.yaml"


def _intent(tmp_path: Path, text: str = INTENT, profile: str = "profile.yaml") -> Path:
    path = tmp_path / "intent.yaml"
    path.write_text(text.replace("PROFILE", profile))
    return path


def _refused(path: Path, *fragments: str) -> str:
    """The one problem `check` reports: located, one line, holding every fragment."""
    with pytest.raises(InfraError) as info:
        api.check(path)
    text = str(info.value.problems[0])
    assert LOCATED.match(text), text
    assert "\n" not in text
    for fragment in fragments:
        assert fragment in text, text
    return text


# --- bounded loading --------------------------------------------------------------------------------------------------

def test_alias_bomb_is_refused_at_its_line_within_a_second(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text("apiVersion: infra.dev/v1alpha1\nkind: ServingIntent\n" + BOMB + "spec: *a8\n")
    started = time.perf_counter()
    text = _refused(path, "aliases expand to more than", ":10:")
    assert time.perf_counter() - started < 1.0, text


@pytest.mark.parametrize("body", ["[" * 100_000, "{a: " * 5000, "[" * 500 + " : x", "[" * 70 + "1" + "]" * 70])
def test_deep_flow_nesting_is_refused_fast(tmp_path, body):
    path = tmp_path / "deep.yaml"
    path.write_text("apiVersion: infra.dev/v1alpha1\nkind: ServingIntent\nspec: " + body + "\n")
    started = time.perf_counter()
    _refused(path, f"nested more than {MAX_DEPTH} levels deep")
    assert time.perf_counter() - started < 1.0


def test_deep_block_nesting_is_refused(tmp_path):
    lines = "".join("  " * (i + 1) + f"k{i}:\n" for i in range(300))
    path = tmp_path / "deep.yaml"
    path.write_text("apiVersion: infra.dev/v1alpha1\nkind: ServingIntent\nspec:\n" + lines)
    _refused(path, "nested more than")


def test_recursive_alias_is_refused_not_a_recursion_error(tmp_path):
    path = _intent(tmp_path, INTENT.replace("name: hostile", "name: &r [*r, 1]"))
    _refused(path, "metadata.name")
    # PyYAML (catalog overlays) builds the cycle itself: the depth bound ends the walk over it.
    with pytest.raises(CatalogError, match="nested more than"):
        Catalog([_overlay(tmp_path, "devices", "name: H100-SXM\nnotes: &r [*r, 1]\n")])


def test_depth_in_a_parsed_tree_is_located_at_the_nearest_position():
    from ruamel.yaml import YAML

    tree = YAML(typ="rt").load("a:\n  b: {c: " + "[" * 70 + "1" + "]" * 70 + "}\n")
    with pytest.raises(IntentError, match=r"f\.yaml:2:\d+: a\.b\.c\[0\].*nested more than"):
        check_tree(tree, "f.yaml", error=IntentError)


@pytest.mark.parametrize("body", ["[" * 5000 + "1" + "]" * 5000, "{a: " * 5000 + "1" + "}" * 5000])
def test_parser_recursion_is_located_when_libyaml_stops_early(body):
    # Past ruamel's recursion limit the tree is never built; the text itself says where the nesting runs deep.
    started = time.perf_counter()
    with pytest.raises(IntentError, match=r"f\.yaml:3:\d+: nested more than"):
        load_yaml('d: "\\ud800"\na:\n  b: ' + body + "\n", "f.yaml")
    assert time.perf_counter() - started < 2.0


def test_shared_anchors_within_bounds_still_load(tmp_path):
    data, _ = load_yaml("a: &x {b: 1, c: [1, 2]}\nd: *x\ne: *x\n", "f.yaml")
    assert data["d"] == data["e"] == {"b": 1, "c": [1, 2]}


def test_oversized_file_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"a" * ((16 << 20) + 1))
    _refused(path, "over the 16 MiB limit")
    with pytest.raises(IntentError, match="over the 100 bytes limit"):
        read_text(path, "plan", limit=100)


def test_read_limited_returns_what_fits(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_limited(path, "test", limit=100) == b"x" * 100


def test_json_nested_past_the_depth_is_refused_with_its_line():
    with pytest.raises(InfraError, match=r"f\.jsonl:7: nested more than"):
        loads_json("[" * 100_000 + "]" * 100_000, "f.jsonl", line=7)
    with pytest.raises(InfraError, match="nested more than"):
        loads_json("[" * 70 + "]" * 70, "f.jsonl", line=1)
    assert loads_json('{"a": [1, {"b": 2}]}', "f.jsonl") == {"a": [1, {"b": 2}]}


def test_shared_objects_count_as_expanded():
    leaf: list = ["x"] * 10
    for _ in range(6):
        leaf = [leaf] * 10  # ten million nodes when walked, seventy objects
    with pytest.raises(InfraError, match="aliases expand"):
        check_tree({"spec": leaf}, "f.yaml")


# --- catalog overlays -------------------------------------------------------------------------------------------------

def _overlay(tmp_path: Path, kind: str, text: str) -> Path:
    (tmp_path / "cat" / kind).mkdir(parents=True)
    (tmp_path / "cat" / kind / "x.yaml").write_text(text)
    return tmp_path / "cat"


def test_catalog_overlay_bomb_is_refused(tmp_path):
    with pytest.raises(CatalogError, match=r"x\.yaml:\d+:\d+: YAML aliases expand"):
        Catalog([_overlay(tmp_path, "devices", "name: H100-SXM\n" + BOMB)])


def test_catalog_overlay_aliases_not_a_list_is_a_catalog_error(tmp_path):
    with pytest.raises(CatalogError):
        Catalog([_overlay(tmp_path, "devices", "name: NewCard\naliases: 5\n")])


def test_catalog_conventions_devices_as_a_list_is_a_catalog_error(tmp_path):
    with pytest.raises(CatalogError, match="devices"):
        Catalog([_overlay(tmp_path, "conventions", "devices: [a, b]\n")])


# --- shapes and paths the loader did not expect -----------------------------------------------------------------------

def test_kind_given_as_a_list_is_located(tmp_path):
    path = _intent(tmp_path, INTENT.replace("kind: ServingIntent", "kind: [a, b]"))
    _refused(path, "unknown kind")


@pytest.mark.parametrize("profile,why", [("p" * 5000 + ".yaml", "file name too long"),
                                         ('"a\\0b.yaml"', "NUL character")])
def test_profile_path_the_os_cannot_look_up_is_located(tmp_path, profile, why):
    _refused(_intent(tmp_path, profile=profile), "cannot be opened", why)


def test_trace_path_with_a_nul_is_located(tmp_path):
    _profile(tmp_path)
    text = INTENT.replace("input_tokens: {mean: 1000, max: 4k}", 'input_tokens: {trace: "t\\0.jsonl"}')
    _refused(_intent(tmp_path, text), "cannot be opened", "NUL character")


# --- numbers past what the planner can compute with -------------------------------------------------------------------

def test_integer_past_float_range_is_a_validation_error_not_an_overflow():
    with pytest.raises(ValueError, match="too large"):
        parse_count(10 ** 400)


@pytest.mark.parametrize("parse,value,bound", [(parse_duration, "1e308s", "a year"),
                                               (parse_count, "1e20", "2^53"),
                                               (parse_money_per_hour, "$1e15/h", "$1e6/h")])
def test_quantities_are_bounded(parse, value, bound):
    with pytest.raises(ValueError, match=re.escape(bound)):
        parse(value)


@pytest.mark.parametrize("budget", ["per_million_tokens: $1e308/Mtok", "per_request: $1e15"])
def test_budgets_per_token_or_request_past_solver_range_are_refused(tmp_path, budget):
    _profile(tmp_path)  # both were an OverflowError / TypeError in the solver
    text = INTENT.replace("      slo:", f"      budget: {{{budget}}}\n      slo:")
    _refused(_intent(tmp_path, text), "$1e6")


def test_histogram_weight_past_range_is_refused(tmp_path):
    _profile(tmp_path)  # 1e308 normalised to NaN lengths deep in the performance model
    text = INTENT.replace("input_tokens: {mean: 1000, max: 4k}",
                          "input_tokens: {histogram: [{le: 1k, weight: 1e308}, {le: 4k, weight: 1}]}")
    _refused(_intent(tmp_path, text), "weight")


def test_money_per_month_converts_before_the_bound():
    assert parse_money_per_hour("$21900/month") == pytest.approx(30.0)


@pytest.mark.parametrize("nodes,price,fragment", [
    ("4294967297", "$2/h", "above the 100,000 one pool"),   # was a MemoryError in placement
    ("1" + "0" * 300, "$2/h", "above the 100,000 one pool"),  # was an OverflowError in resolve
    ("2", "$1e15/h", "$1e6/h"),                              # was a TypeError in the solver
])
def test_inventory_past_solver_range_is_refused(tmp_path, nodes, price, fragment):
    _profile(tmp_path, nodes=nodes, price=price)
    _refused(_intent(tmp_path), fragment)


def test_budget_past_solver_range_is_refused(tmp_path):
    _profile(tmp_path)
    text = INTENT.replace("      slo:", "      budget: {per_hour: $1e308/h}\n      slo:")
    _refused(_intent(tmp_path, text), "$1e6/h")


# --- strings the manifests carry --------------------------------------------------------------------------------------

def test_overlong_resource_name_is_refused_in_the_profile(tmp_path):
    _profile(tmp_path, count="nvidia.com/" + "x" * 10_000)  # rendered as a flow key, it broke the manifest YAML
    _refused(_intent(tmp_path), "not a valid Kubernetes resource name")


def test_hami_chip_placeholder_is_still_a_resource_name(tmp_path):
    _profile(tmp_path, count="'huawei.com/Ascend{chip}'")
    api.check(_intent(tmp_path))


@pytest.mark.parametrize("selector,fragment", [("bad key!: x", "label key"), ("a: " + "v" * 64, "label value")])
def test_node_selector_must_be_kubernetes_labels(tmp_path, selector, fragment):
    _profile(tmp_path, selector=selector)
    _refused(_intent(tmp_path), fragment)


def test_a_megabyte_value_is_named_not_echoed(tmp_path):
    path = _intent(tmp_path, INTENT.replace("Llama-3.1-8B-Instruct", "ab" * 500_000))
    _profile(tmp_path)
    text = _refused(path, "(1,000,000 characters)")
    assert len(text) < 1000


def test_clip_keeps_short_messages_and_paths():
    assert clip("unknown model 'x' — To fix: see /a/b/c") == "unknown model 'x' — To fix: see /a/b/c"
    assert shown("é" * 1000).endswith("…' (1,000 characters)")
    assert shown(5) == "5"


# --- the fuzzer's own verdicts ----------------------------------------------------------------------------------------

def _result(argv: list[str], code: int, stdout: str = "", stderr: str = "", **extra) -> dict:
    return {"argv": argv, "code": code, "stdout": stdout, "stderr": stderr, "exception": None, "json_problem": None,
            "plan_nonfinite": False, **extra}


def test_fuzz_verdicts():
    case = fuzz.Case(0, "intent", "examples/x.yaml", ["m"], commands=[["check", "f.yaml"]])
    assert fuzz.classify(case, [_result(["check"], 1, stderr="error: f.yaml:3:5: spec: bad — To fix: x\n")]) == \
        ("error", "")
    assert fuzz.classify(case, [_result(["check"], 1, stderr="error: bad — To fix: x\n")])[0] == "wrong_exit"
    assert fuzz.classify(case, [_result(["check"], 4)])[0] == "traceback"
    # A file's field without its line is not located, whatever the case; a flag's error needs only its fix.
    unlocated = "error: /w/plan.yaml: spec.services.chat.workload.rate: bad — To fix: x\n"
    assert fuzz.classify(case, [_result(["check"], 1, stderr=unlocated)])[0] == "wrong_exit"
    flags = fuzz.Case(1, "flag", "bench flags", ["m"], commands=[["bench"]], flag_case=True)
    assert fuzz.classify(flags, [_result(["bench"], 1, stderr=unlocated)])[0] == "wrong_exit"
    assert fuzz.classify(flags, [_result(["bench"], 1, stderr="error: --requests: 0 is not positive — To fix: x\n")]) \
        == ("error", "")
    assert fuzz.classify(flags, [_result(["bench"], 1, stderr="error: deployment.agg: pp 9 — To fix: x\n")]) == \
        ("error", "")
    crashed = _result(["plan"], None, exception={"type": "ValueError", "message": "m", "where": "a.py:1 in f"})
    assert fuzz.classify(case, [crashed]) == ("traceback", "plan: ValueError: m (at a.py:1 in f)")
    assert fuzz._json_problem('{"a": NaN}').startswith("non-finite")
    assert fuzz._json_problem('progress\n{"a": 1}') is None
    assert fuzz._json_problem(json.dumps({"a": [1, 2]})) is None


def test_fuzz_documents_are_deterministic():
    base = {"spec": {"services": [{"name": "a", "slo": {"ttft": {"p99": "150ms"}}, "n": [1, 2]}]}}
    for seed in range(30):
        one = fuzz.build_document(base, fuzz.random.Random(seed))
        assert one == fuzz.build_document(base, fuzz.random.Random(seed))


# --- planning at the edges of what an intent may say ------------------------------------------------------------------

def test_a_free_owned_pool_is_planned_not_divided_by(tmp_path):
    # A pool priced $0/h (owned, already paid for) beside a priced one: pairing pools for prefill and decode
    # ranked them by FLOPs and bandwidth per dollar, and divided by zero.
    (tmp_path / "profiles").mkdir()
    profile = (ROOT / "examples" / "profiles" / "cpu-nodes.yaml").read_text()
    free = re.sub(r"price: \$[0-9.]+/h", "price: $0/h", profile, count=1)
    assert free != profile
    (tmp_path / "profiles" / "cpu-nodes.yaml").write_text(free)
    intent = tmp_path / "intent.yaml"
    intent.write_text((ROOT / "examples" / "cpu-small-model.yaml").read_text())
    result = api.plan(intent)
    assert result.plan.spec.cost.per_hour == 0


def test_a_stage_budget_below_a_microsecond_is_stated_not_rounded_to_zero():
    # A pipeline objective of 1e-300ms left each LLM stage a budget that printed as 0.000ms, which the stage's own
    # objectives refused (a traceback); stated as a microsecond, the search finds no shape that fast.
    from infra.planner.pipeline import plan_units, stage_service

    resolved = api.load_intent(ROOT / "examples" / "omni-speech.yaml")
    rs = resolved.services[0]
    llm = next(u for u in plan_units(rs, resolved) if u.stage.kind == "llm")
    llm.first, llm.full = {"p99": 1e-303}, {"p99": 1e-303}
    svc = stage_service(llm, rs)
    assert svc.slo.ttft["p99"] == svc.slo.e2e["p99"] == pytest.approx(1e-6)


def test_a_memory_unit_of_less_than_a_byte_is_refused(tmp_path):
    # `1e-9MiB` rounded to 0 bytes, and the plan it made broke its own contract.
    (tmp_path / "profile.yaml").write_text(PROFILE.replace("NODES", "2").replace("PRICE", "$2/h").replace(
        "SELECTOR", "").replace("{count: COUNT}", "{count: nvidia.com/gpu, memory_unit: 1e-9MiB}"))
    _refused(_intent(tmp_path), "memory_unit is 0 bytes")


def test_allocatable_memory_below_a_mebibyte_is_refused(tmp_path):
    # `1e-300GiB` is 0 bytes; the plan made on it broke its own contract (device memory above 0).
    profile = _profile(tmp_path)
    profile.write_text(profile.read_text().replace("devices_per_node: 8", "devices_per_node: 8\n"
                                                   "      allocatable_memory: 1e-300GiB"))
    _refused(_intent(tmp_path), "allocatable_memory is 0 bytes, below 1MiB")


def test_a_nic_without_bandwidth_is_refused(tmp_path):
    # `0Gbps` made a plan whose own contract (NIC bandwidth above 0) refused it: a traceback from `plan`.
    profile = _profile(tmp_path)
    profile.write_text(profile.read_text().replace("devices_per_node: 8", "devices_per_node: 8\n"
                                                   "      nics: [{name: mlx5_0, bandwidth: 0Gbps}]"))
    _refused(_intent(tmp_path), "bandwidth is 0")


def test_a_rate_below_one_request_a_year_is_refused():
    # At 1e-300/s the plan's spare capacity and cost per request ran past any float.
    from infra.intent.units import parse_rate

    with pytest.raises(ValueError, match="below the one request a year"):
        parse_rate("1e-300/s")
    assert parse_rate("1/day") == pytest.approx(1 / 86400) and parse_rate(0) == 0


def test_estimate_objective_of_zero_is_refused_as_in_an_intent():
    case = {"model": "Llama-3.1-8B-Instruct", "device": "H100-SXM", "isl": "2k", "osl": 256, "rate": "5/s",
            "max_rate": True, "slo": {"ttft_p99": "0ms"}}
    with pytest.raises(InfraError) as info:
        api.estimate(case)
    text = str(info.value.problems[0])
    assert text.startswith("slo: objective ttft_p99 is 0ms") and "give a time above zero" in text


# --- the plan contract: every number bounded, copies of the intent validated, references resolved -------------------

def _plan_file(tmp_path: Path, name: str, change: Any) -> Path:
    """A golden plan with `change(data)` applied, written as YAML."""
    import yaml

    data = yaml.safe_load((ROOT / "tests" / "golden" / name / "plan.yaml").read_text())
    change(data)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=10_000))
    return path


def _set(path: str, value: Any) -> Any:
    def change(data: Any) -> None:
        keys = [int(k) if k.isdigit() and len(k) < 10 else k for k in path.split("/")]
        node = data
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return change


def _plan_refused(path: Path, *fragments: str) -> str:
    from infra.planner.types import load_plan

    with pytest.raises(IntentError) as info:
        load_plan(path)
    text = str(info.value.problems[0])
    assert LOCATED.match(text), text
    assert "\n" not in text
    for fragment in fragments:
        assert fragment in text, text
    return text


ALLOC = "spec/services/0/allocations/0"


@pytest.mark.parametrize("name,path,value,fragments", [
    # Each crashed `bench --simulate` (MemoryError, OverflowError) or `render` before it was bounded.
    ("chat-mixed-fleet", f"{ALLOC}/parallel/attention_dp", 4294967297, ["parallel.attention_dp", "1024"]),
    ("chat-mixed-fleet", f"{ALLOC}/parallel/sp", 10 ** 300, ["parallel.sp"]),
    ("pd-across-devices", f"{ALLOC}/prefill_workers", 10 ** 9, ["prefill_workers"]),
    ("pd-across-devices", f"{ALLOC}/engines/decode/max_num_batched_tokens", 10 ** 300, ["max_num_batched_tokens"]),
    ("omni-speech", "spec/services/2/allocations/0/devices_per_worker", 10 ** 9, ["devices_per_worker"]),
    ("omni-speech", "spec/services/3/allocations/0/replicas", 10 ** 300, ["replicas"]),
    ("chat-mixed-fleet", f"{ALLOC}/predicted/ttft_p99/target_ms", float("nan"), ["target_ms", "finite"]),
    ("omni-speech", "spec/pipelines/0/objectives/code2wav_first_output_p99/target_ms", float("nan"), ["target_ms"]),
    ("chat-mixed-fleet", "spec/services/0/objectives/" + "9" * 100_000, 5.0, ["(100,000 characters)"]),
    ("chat-mixed-fleet", "spec/cluster/pools/0/resources/count", "x" * 10_000, ["resources.count"]),
    ("chat-mixed-fleet", "spec/cluster/pools/1/vendor", "9" * 50_000, ["vendor"]),
])
def test_plan_numbers_and_names_are_bounded_at_load(tmp_path, name, path, value, fragments):
    _plan_refused(_plan_file(tmp_path, name, _set(path, value)), *fragments)


@pytest.mark.parametrize("path,value,fragments", [
    ("rate/peak", "1/s", ["workload.rate:", "baseline (8/s) is above peak (1/s)"]),
    ("rate/", 1, ["workload.rate.", "unknown field"]),
    ("input_tokens/mean", 10 ** 15, ["workload.input_tokens", "raise max"]),
    ("output_tokens", [1, 2], ["workload.output_tokens", "a list"]),
    ("output_tokens/percentiles/bogus", 5, ["percentiles"]),
])
def test_the_plans_copy_of_the_workload_is_validated_at_its_line(tmp_path, path, value, fragments):
    # These were told only when `bench` read the workload, as `FILE: spec.services.chat.workload...` (no line).
    _plan_refused(_plan_file(tmp_path, "chat-mixed-fleet", _set(f"spec/services/0/workload/{path}", value)),
                  "spec.services[0].workload", *fragments)


def test_the_plans_copy_of_availability_is_validated_at_its_line(tmp_path):
    # `render` read min_replicas with int() and stopped with a ValueError.
    _plan_refused(_plan_file(tmp_path, "chat-mixed-fleet", _set("spec/services/0/availability/min_replicas", "5Gbps")),
                  "spec.services[0].availability.min_replicas", "a whole number")


def test_a_stages_work_and_unit_are_checked_at_load(tmp_path):
    _plan_refused(_plan_file(tmp_path, "omni-speech", _set("spec/pipelines/0/stages/0/work/audio", "1e308s")),
                  "spec.pipelines[0].stages[0].work.audio", "above a year")
    # A unit naming no service entry made `bench` stop with StopIteration.
    _plan_refused(_plan_file(tmp_path, "omni-speech", _set("spec/pipelines/0/stages/2/unit", "a b a")),
                  "spec.pipelines[0].stages[2].unit", "none of the plan's services")

    def drop_unit(data: Any) -> None:
        del data["spec"]["pipelines"][0]["stages"][0]["unit"]

    _plan_refused(_plan_file(tmp_path, "omni-speech", drop_unit), "names no unit")


def test_allocations_that_contradict_themselves_are_refused_at_load(tmp_path):
    # An aggregated allocation marked disagg (or one losing an engine) ended `bench` in a KeyError.
    _plan_refused(_plan_file(tmp_path, "chat-mixed-fleet", _set(f"{ALLOC}/mode", "disagg")),
                  "allocations[0].engines", "needs engines for decode, prefill, found 'agg'")

    def drop_prefill(data: Any) -> None:
        del data["spec"]["services"][0]["allocations"][0]["engines"]["prefill"]

    _plan_refused(_plan_file(tmp_path, "pd-across-devices", drop_prefill), "found 'decode'")
    _plan_refused(_plan_file(tmp_path, "chat-mixed-fleet", _set(f"{ALLOC}/pool", "nope")),
                  "allocations[0].pool", "not in spec.cluster.pools")


def test_a_plan_without_services_is_refused_at_load(tmp_path):
    # Fuzz seed 2, case 1643: `spec.services` aliased to an empty list ended `bench --simulate` in an IndexError.
    _plan_refused(_plan_file(tmp_path, "chat-mixed-fleet", _set("spec/services", [])), "spec.services",
                  "at least 1")


def test_a_capacity_below_a_request_a_year_is_refused_at_load(tmp_path):
    # Fuzz seed 3, case 56: a capacity of 5e-324 requests/s made `render`'s baseline replicas infinite.
    _plan_refused(_plan_file(tmp_path, "omni-speech", _set("spec/services/1/allocations/0/capacity_per_replica",
                                                          5e-324)),
                  "capacity_per_replica", "greater than or equal")


def test_an_attainment_objective_is_a_metric_and_a_percentile(tmp_path):
    # Fuzz seed 4, case 380: a `<<` key under attainment_objectives ended `bench --simulate` in a ValueError.
    _plan_refused(_plan_file(tmp_path, "pd-across-devices", _set("spec/services/0/attainment_objectives",
                                                                {"<<": 100.0})),
                  "attainment_objectives", "<metric>_<percentile>")


def test_a_stage_brings_some_work(tmp_path):
    # Fuzz seed 5: `work.audio: 0s` in a plan's pipeline ended `bench --simulate` in a ZeroDivisionError.
    _plan_refused(_plan_file(tmp_path, "omni-speech", _set("spec/pipelines/0/stages/3/work/audio", "0s")),
                  "work.audio", "greater than 0")


def test_pool_names_are_unique_in_a_plan(tmp_path):
    _plan_refused(_plan_file(tmp_path, "chat-mixed-fleet", _set("spec/cluster/pools/1/name", "h100-a")),
                  "spec.cluster", "h100-a")


def test_valid_plans_still_load():
    from infra.planner.types import load_plan

    for path in sorted((ROOT / "tests" / "golden").glob("*/plan.yaml")):
        load_plan(path)


# --- bench --simulate: what the performance model refuses is told at the plan's line ----------------------------------

def _bench(path: Path, **kw: Any) -> str:
    with pytest.raises(InfraError) as info:
        api.bench(simulate=path, requests=kw.pop("requests", 5), **kw)
    text = str(info.value.problems[0])
    assert "\n" not in text
    return text


@pytest.mark.parametrize("name,path,value,fragment", [
    ("chat-mixed-fleet", f"{ALLOC}/parallel/pp", 1000, "spec.services[0].allocations[0].parallel: pp 1000 exceeds"),
    ("pd-across-devices", f"{ALLOC}/decode_parallel/ep", 1000,
     "spec.services[0].allocations[0].decode_parallel: decode: Llama-3.1-70B has no experts"),
    ("pd-across-devices", f"{ALLOC}/engines/prefill/max_num_batched_tokens", 10 ** 9,
     "spec.services[0].allocations[0].parallel: Llama-3.1-70B fp8 tp1 on H200: does not fit"),
])
def test_shapes_the_model_refuses_are_located_in_the_plan(tmp_path, name, path, value, fragment):
    text = _bench(_plan_file(tmp_path, name, _set(path, value)))
    assert LOCATED.match(text) and fragment in text, text


@pytest.mark.parametrize("name,path,fragment", [
    ("chat-mixed-fleet", "spec/services/0/model", "spec.services[0].model: unknown model"),
    ("chat-mixed-fleet", f"{ALLOC}/framework", "spec.services[0].allocations[0].framework: unknown framework"),
    ("omni-speech", "spec/services/0/allocations/0/device", "spec.services[0].allocations[0].device: unknown device"),
])
def test_names_the_catalog_lacks_are_located_in_the_plan(tmp_path, name, path, fragment):
    flags = {"service": "voice"} if name == "omni-speech" else {}
    text = _bench(_plan_file(tmp_path, name, _set(path, "ab\x00" * 1000)), **flags)
    assert LOCATED.match(text) and fragment in text and "(3,000 characters)" in text, text


def test_a_simulation_of_more_engines_than_memory_holds_is_refused(tmp_path):
    text = _bench(_plan_file(tmp_path, "chat-mixed-fleet", _set(f"{ALLOC}/replicas", 100_000)))
    assert LOCATED.match(text) and "allocations[1].replicas" in text and "above the 100,000" in text, text


@pytest.mark.parametrize("flags,fragment", [
    ({"requests": 10 ** 6}, "--requests: 1,000,000 is above the 100,000"),
    ({"requests": 10 ** 23}, "--requests"),
    ({"concurrency": 10 ** 23, "service": "voice"}, "--concurrency"),
])
def test_simulated_load_flags_are_bounded(flags, fragment):
    # 1e6 requests ran past the fuzzer's 30 s; 1e23 clients or requests ended in numpy's IndexError/ValueError.
    assert fragment in _bench(ROOT / "tests" / "golden" / "omni-speech" / "plan.yaml", **flags)


# --- readers of records and side files stay within the limits -------------------------------------------------------

def test_json_lines_nested_deeply_are_refused_at_their_line(tmp_path):
    from infra.limits import read_jsonl

    path = tmp_path / "trace.jsonl"
    path.write_text('{"input_tokens": 5}\n' + "[" * 100_000 + "\n")
    with pytest.raises(InfraError, match=r"trace\.jsonl:2: nested more than"):
        read_jsonl(path, "trace file")


def test_benchmark_results_nested_deeply_are_located(tmp_path):
    from infra.bench.results import read_results

    path = tmp_path / "r.json"
    path.write_text('{"a":\n' + "[" * 100_000 + "\n")
    with pytest.raises(InfraError, match=r"r\.json:2:\d+: nested more than"):
        read_results(path, "vllm-bench")
    path = tmp_path / "r.yaml"
    path.write_text("x-bomb: 1\n" + BOMB)
    with pytest.raises(InfraError, match=r"r\.yaml:\d+:\d+: YAML aliases expand"):
        read_results(path, "guidellm")


def test_model_config_nested_deeply_is_a_located_catalog_error(tmp_path):
    from infra.catalog.hf import model_from_hf_config

    path = tmp_path / "config.json"
    path.write_text("[" * 100_000)
    with pytest.raises(CatalogError, match=r"config\.json:1:\d+: nested more than"):
        model_from_hf_config(path)


def test_manifest_of_deep_brackets_is_a_finding_not_a_recursion_error(tmp_path):
    from infra.validators.manifests import read_file

    path = tmp_path / "m.yaml"
    path.write_text("kind: ConfigMap\ndata: " + "[" * 2000 + "]" * 2000 + "\n")
    started = time.perf_counter()
    objs, findings = read_file(path, "m.yaml")
    assert objs == [] and findings[0].line == 2 and "nested more than" in findings[0].message
    assert time.perf_counter() - started < 1.0


def test_settings_override_bomb_is_refused(tmp_path):
    from infra.render.settings import load_settings

    (tmp_path / "settings.yaml").write_text(BOMB)
    with pytest.raises(IntentError, match=r"settings\.yaml:\d+:\d+: YAML aliases expand"):
        load_settings(tmp_path)
