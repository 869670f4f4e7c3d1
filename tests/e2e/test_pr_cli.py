"""`infra pr` as a user runs it on a clone of a GitOps repository."""

from __future__ import annotations

from ..conftest import EXAMPLES
from ..gitrepo import make_repos
from .test_cli import infra

INTENT = str(EXAMPLES / "small-model-shared.yaml")


def test_pr_refuses_a_dirty_clone_in_one_line(tmp_path):
    _, clone = make_repos(tmp_path)
    (clone / "README.md").write_text("edited\n")
    out = infra("pr", INTENT, "--repo", str(clone))
    assert out.returncode == 1 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "uncommitted changes (README.md)" in lines[0] and "--allow-dirty" in lines[0]


def test_pr_refuses_a_root_outside_the_repository(tmp_path):
    _, clone = make_repos(tmp_path)
    out = infra("pr", INTENT, "--repo", str(clone), "--root", "../elsewhere")
    assert out.returncode == 1 and "--root '../elsewhere'" in out.stderr and "To fix" in out.stderr


def test_pr_needs_a_git_repository(tmp_path):
    out = infra("pr", INTENT, "--repo", str(tmp_path))
    assert out.returncode == 1 and "not inside a git work tree" in out.stderr


def test_argocd_and_flux_exclude_each_other(tmp_path):
    _, clone = make_repos(tmp_path)
    out = infra("pr", INTENT, "--repo", str(clone), "--argocd", "--flux")
    assert out.returncode == 1 and "exclude each other" in out.stderr
