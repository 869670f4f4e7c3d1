"""Hostile and extreme input: each case is a mutation `benchmarks/fuzz.py` found to crash, hang or mislead, now
refused with a located one-line error (or, for the fuzzer itself, its verdicts pinned down)."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

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
