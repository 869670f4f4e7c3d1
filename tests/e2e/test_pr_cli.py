"""`infra pr` as a user runs it on a clone of a GitOps repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import EXAMPLES
from ..github_api import GitHubServer
from ..gitrepo import git, make_repos
from .test_cli import infra

INTENT = str(EXAMPLES / "small-model-shared.yaml")
TOKEN = "ghp_e2eTOKEN0123456789abcdef"


def test_pr_refusals_are_one_line_each(tmp_path):
    """A dirty clone, a root outside the repository, no repository at all: refused before planning."""
    _, clone = make_repos(tmp_path)
    (clone / "README.md").write_text("edited\n")
    dirty = infra("pr", INTENT, "--repo", str(clone))
    assert dirty.returncode == 1 and dirty.stdout == ""
    lines = dirty.stderr.strip().splitlines()
    assert len(lines) == 1 and "uncommitted changes (README.md)" in lines[0] and "--allow-dirty" in lines[0]
    outside = infra("pr", INTENT, "--repo", str(clone), "--root", "../elsewhere", "--allow-dirty")
    assert outside.returncode == 1 and "--root '../elsewhere'" in outside.stderr and "To fix" in outside.stderr
    (tmp_path / "plain").mkdir()
    nogit = infra("pr", INTENT, "--repo", str(tmp_path / "plain"))
    assert nogit.returncode == 1 and "not inside a git work tree" in nogit.stderr


def test_argocd_and_flux_exclude_each_other(tmp_path):
    _, clone = make_repos(tmp_path)
    out = infra("pr", INTENT, "--repo", str(clone), "--argocd", "--flux")
    assert out.returncode == 1 and "exclude each other" in out.stderr


def test_pr_end_to_end_then_unchanged_then_published(tmp_path):
    """The main job: plan and commit; the stored plan reproduces the same tree; --push opens the pull request."""
    remote, clone = make_repos(tmp_path)
    first = infra("pr", INTENT, "--repo", str(clone))
    assert first.returncode == 0, first.stderr
    assert "committed" in first.stdout and "on infra/summariser" in first.stdout and "next: git -C" in first.stdout
    files = git(clone, "ls-tree", "-r", "--name-only", "infra/summariser").split()
    assert "deploy/summarise/base/kustomization.yaml" in files and "deploy/.infra/summariser/plan.yaml" in files
    assert any(f.startswith("deploy/summarise/base/deployment-") for f in files)

    plan = tmp_path / "plan.yaml"
    plan.write_text(git(clone, "show", "infra/summariser:deploy/.infra/summariser/plan.yaml"))
    again = infra("pr", INTENT, "--repo", str(clone), "--plan", str(plan))
    assert again.returncode == 0, again.stderr
    assert "no new commit: infra/summariser already holds this plan" in again.stdout

    with GitHubServer(TOKEN, "acme/deploy", str(remote)) as gh:
        env = {**os.environ, "GITHUB_TOKEN": TOKEN}
        out = subprocess.run([sys.executable, "-m", "infra", "pr", INTENT, "--repo", str(clone), "--plan", str(plan),
                              "--push", "--github", "acme/deploy", "--github-api", gh.url, "--json"],
                             capture_output=True, text=True, env=env, timeout=120, check=False)
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert result["pull_request"] == {"number": 1, "url": "https://github.example/acme/deploy/pull/1",
                                          "action": "created"}
        assert gh.state.pulls[0]["body"] == result["body"] and "deployment-summarise-a0.yaml" in result["body"]
        assert "verification: pass (simulation, 2000 requests per service" in result["body"]
    assert git(remote, "rev-parse", "infra/summariser") == git(clone, "rev-parse", "infra/summariser")
    assert TOKEN not in out.stdout + out.stderr and TOKEN not in (clone / ".git" / "config").read_text()


def _intent_tree(top: Path, profile_ref: str) -> Path:
    """An intent that reads three other files: its cluster profile, the calibration the profile names (`..` from
    the profile's folder) and a trace of token lengths."""
    intents = top / "intents"
    (intents / "traces").mkdir(parents=True)
    shutil.copy(EXAMPLES / "traces" / "agent-steps.jsonl", intents / "traces" / "steps.jsonl")
    profile = (intents / profile_ref).resolve()
    profile.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "profiles" / "lab-h100.yaml", profile)
    (profile.parent.parent / "calibrations").mkdir(exist_ok=True)
    shutil.copy(EXAMPLES / "calibrations" / "chat-h100.yaml", profile.parent.parent / "calibrations")
    text = (EXAMPLES / "measured-chat.yaml").read_text()
    text = text.replace("profile: profiles/lab-h100.yaml", f"profile: {profile_ref}")
    text = text.replace("output_tokens: {mean: 16, max: 32}", "output_tokens: {trace: traces/steps.jsonl}")
    assert f"profile: {profile_ref}" in text and "traces/steps.jsonl" in text
    (intents / "chat.yaml").write_text(text)
    return intents / "chat.yaml"


@pytest.mark.parametrize("profile_ref", ["profiles/lab-h100.yaml", "../profiles/lab-h100.yaml"])
def test_the_kept_intent_checks_in_place(tmp_path, profile_ref):
    """`.infra/<plan>/intent.yaml` keeps every file it reads beside it: `infra check` passes on the kept copy in
    the GitOps repository, and a copy whose files all lay below the intent is kept byte for byte, so it gives the
    plan's own fingerprint."""
    _, clone = make_repos(tmp_path)
    intent = _intent_tree(clone, profile_ref)
    git(clone, "add", ".")
    git(clone, "commit", "-q", "-m", "intents")
    out = infra("pr", str(intent), "--repo", str(clone), "--no-verify")
    assert out.returncode == 0, out.stderr
    git(clone, "checkout", "-q", "infra/measured-chat")
    kept = clone / "deploy" / ".infra" / "measured-chat"
    files = sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file())
    check = infra("check", str(kept / "intent.yaml"), cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert "valid intent" in check.stdout
    if profile_ref.startswith(".."):
        # Outside the intent's folder: kept under inputs/, the references to them rewritten, nothing else.
        assert files == ["files.txt", "inputs/chat-h100.yaml", "inputs/lab-h100.yaml", "intent.yaml", "plan.yaml",
                         "traces/steps.jsonl"]
        assert (kept / "intent.yaml").read_text() == intent.read_text().replace(profile_ref, "inputs/lab-h100.yaml")
        assert (kept / "inputs" / "lab-h100.yaml").read_text() == (clone / "profiles" / "lab-h100.yaml").read_text(
        ).replace("calibration: ../calibrations/chat-h100.yaml", "calibration: chat-h100.yaml")
        return
    assert files == ["calibrations/chat-h100.yaml", "files.txt", "intent.yaml", "plan.yaml",
                     "profiles/lab-h100.yaml", "traces/steps.jsonl"]
    assert (kept / "intent.yaml").read_bytes() == intent.read_bytes()
    from infra.api import load_intent
    from infra.planner.plan import fingerprint
    from infra.planner.types import load_plan

    assert fingerprint(load_intent(kept / "intent.yaml")) == load_plan(kept / "plan.yaml").spec.fingerprint
