"""What the commands that write leave behind, tried as a careless or hostile user would: nothing outside the
directory named, nothing half-written, no file of the user's replaced or deleted without --force."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ..conftest import EXAMPLES, ROOT
from ..gitrepo import make_repos
from .test_cli import infra

GOLDEN = ROOT / "tests" / "golden" / "small-model-shared"
RESULTS = ROOT / "tests" / "fixtures" / "results"


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_plan_whose_names_climb_out_is_refused_and_writes_nothing(tmp_path):
    plan = yaml.safe_load((GOLDEN / "plan.yaml").read_text())
    plan["spec"]["cluster"]["name"] = "../../../../x43"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(plan, sort_keys=False))
    before = sorted(p.name for p in tmp_path.iterdir())
    out = infra("render", str(bad), "-o", str(tmp_path / "deep" / "er" / "d7"))
    assert out.returncode == 1 and "spec.cluster.name" in out.stderr and "bad.yaml:" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_rendering_again_keeps_the_files_the_user_added(tmp_path):
    out = tmp_path / "m"
    assert infra("render", str(GOLDEN / "plan.yaml"), "-o", str(out)).returncode == 0
    base = next(out.glob("*/base"))
    (out / "notes.txt").write_text("ours\n")
    (base / "user-patch.yaml").write_text("patch: ours\n")
    again = infra("render", str(GOLDEN / "plan.yaml"), "-o", str(out))
    assert again.returncode == 0, again.stderr
    assert (out / "notes.txt").read_text() == "ours\n" and (base / "user-patch.yaml").read_text() == "patch: ours\n"


def test_plan_refuses_before_writing_anything_and_force_writes_beside(tmp_path):
    out = tmp_path / "out"
    (out / "manifests").mkdir(parents=True)
    (out / "manifests" / "mine.yaml").write_text("kind: Mine\n")
    refused = infra("plan", str(EXAMPLES / "small-model-shared.yaml"), "-o", str(out), "--no-verify")
    assert refused.returncode == 1 and "infra never wrote into it" in refused.stderr and "--force" in refused.stderr
    assert files(out) == {"manifests/mine.yaml": b"kind: Mine\n"}  # no plan.yaml or report.md half-way
    forced = infra("plan", str(EXAMPLES / "small-model-shared.yaml"), "-o", str(out), "--no-verify", "--force")
    assert forced.returncode == 0, forced.stderr
    assert (out / "manifests" / "mine.yaml").read_text() == "kind: Mine\n" and (out / "plan.yaml").is_file()
    again = infra("plan", str(EXAMPLES / "small-model-shared.yaml"), "-o", str(out), "--no-verify")
    assert again.returncode == 0, again.stderr  # what infra wrote is its own to replace


def test_plan_keeps_a_linked_report_and_the_file_it_points_to(tmp_path):
    out = tmp_path / "out"
    assert infra("plan", str(EXAMPLES / "small-model-shared.yaml"), "-o", str(out), "--no-verify").returncode == 0
    kept = tmp_path / "kept.md"
    kept.write_text("my report\n")
    (out / "report.md").unlink()
    (out / "report.md").symlink_to(kept)
    run = infra("plan", str(EXAMPLES / "small-model-shared.yaml"), "-o", str(out), "--no-verify")
    assert run.returncode == 1 and "symbolic link" in run.stderr
    assert (out / "report.md").is_symlink() and kept.read_text() == "my report\n"


def test_named_output_files_are_not_replaced_without_force(tmp_path):
    cal = tmp_path / "cal.yaml"
    cal.write_text("mine: true\n")
    out = infra("calibrate", str(RESULTS / "silicon.csv"), "-o", str(cal))
    assert out.returncode == 1 and "already exists" in out.stderr and "--force" in out.stderr
    assert cal.read_text() == "mine: true\n"
    assert infra("calibrate", str(RESULTS / "silicon.csv"), "-o", str(cal), "--force").returncode == 0
    assert cal.read_text().startswith("apiVersion") or "kind: Calibration" in cal.read_text()
    schema = tmp_path / "schema.json"
    schema.write_text("{}\n")
    assert infra("schema", "-o", str(schema)).returncode == 1 and schema.read_text() == "{}\n"
    assert infra("schema", "-o", str(schema), "--force").returncode == 0 and json.loads(schema.read_text())
    assert infra("schema", "-o", str(schema)).returncode == 0  # the same bytes again: nothing to protect


def test_bench_save_is_checked_before_the_run(tmp_path):
    run = tmp_path / "run.jsonl"
    run.write_text('{"kind": "mine"}\n')
    out = infra("bench", "--simulate", str(GOLDEN / "plan.yaml"), "--requests", "20", "--save", str(run))
    assert out.returncode == 1 and "already exists" in out.stderr and run.read_text() == '{"kind": "mine"}\n'


def test_verify_refuses_a_foreign_directory_before_measuring(tmp_path):
    (tmp_path / "measured").mkdir()
    (tmp_path / "measured" / "calibration.yaml").write_text("mine: true\n")
    out = infra("verify", str(GOLDEN / "plan.yaml"), "--endpoint", "http://127.0.0.1:9/v1", "--write",
                str(tmp_path / "measured"))
    assert out.returncode == 1 and "infra never wrote into it" in out.stderr  # not a connection error
    assert files(tmp_path / "measured") == {"calibration.yaml": b"mine: true\n"}


def test_pr_refuses_an_empty_root_and_an_existing_body_file(tmp_path):
    _, clone = make_repos(tmp_path)
    empty = infra("pr", str(EXAMPLES / "small-model-shared.yaml"), "--repo", str(clone), "--root", "")
    assert empty.returncode == 1 and "--root is empty" in empty.stderr
    body = tmp_path / "body.md"
    body.write_text("draft of mine\n")
    out = infra("pr", str(EXAMPLES / "small-model-shared.yaml"), "--repo", str(clone), "--body-file", str(body))
    assert out.returncode == 1 and "already exists" in out.stderr and body.read_text() == "draft of mine\n"
