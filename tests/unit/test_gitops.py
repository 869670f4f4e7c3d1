"""GitOps pull requests against real git repositories made here (a bare remote and a clone) and a local GitHub API
server: branch and commit, idempotency, updates on top, dirty-tree and path-escape refusals, the plan diff against
the base branch, and tokens that never leak."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from infra.errors import EndpointError, InfraError
from infra.gitops.body import Record, pr_body
from infra.gitops.pr import PrRequest, prepare, public_url
from infra.planner.types import DeploymentPlan
from infra.report.plan import plan_yaml

from ..conftest import EXAMPLES
from ..github_api import GitHubServer
from ..gitrepo import commit_file, git, make_repos

TOKEN = "ghp_s3cr3tTOKENvalue0123456789"


@pytest.fixture(scope="module")
def planned() -> DeploymentPlan:
    """One real plan of the small shared-GPU example, reused by every test here."""
    from infra.api import load_intent
    from infra.planner.plan import build_plan

    return build_plan(load_intent(EXAMPLES / "small-model-shared.yaml"))[0]


def replanned(plan: DeploymentPlan, replicas: int) -> DeploymentPlan:
    """The same plan with another replica count and the cost and margins that go with it (as a re-plan gives)."""
    data = plan.model_dump(mode="json", by_alias=True, exclude_none=True)
    svc = data["spec"]["services"][0]
    a = svc["allocations"][0]
    per = a["cost_per_hour"] / a["replicas"]
    a.update(replicas=replicas, devices=replicas * a["devices_per_replica"], cost_per_hour=per * replicas)
    a["predicted"]["ttft_p99"].update(predicted_ms=300.0, margin=0.85)
    svc["cost_per_hour"] = per * replicas
    data["spec"]["cost"]["per_hour"] = per * replicas
    data["spec"]["fingerprint"] = "sha256:" + "1" * 64
    return DeploymentPlan.model_validate(data)


def tiny_render(plan: DeploymentPlan, drop: str | None = None) -> tuple[dict[str, str], list[str]]:
    """Manifests in the shared layout (one ConfigMap per allocation stands in for the workloads)."""
    out = {}
    for svc in plan.spec.services:
        names = []
        for i, a in enumerate(svc.allocations):
            names.append(f"configmap-{svc.name}-a{i}.yaml")
            out[f"{svc.name}/base/{names[-1]}"] = (f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {svc.name}-a{i}"
                                                   f"\ndata:\n  replicas: '{a.replicas}'\n")
        out[f"{svc.name}/base/service-{svc.name}.yaml"] = f"apiVersion: v1\nkind: Service\nmetadata:\n  name: {svc.name}\n"
        out[f"{svc.name}/base/kustomization.yaml"] = "resources:\n" + "".join(f"- {n}\n" for n in sorted(names))
        out[f"{svc.name}/overlays/{plan.spec.cluster.name}/kustomization.yaml"] = "resources:\n- ../../base\n"
    return {k: v for k, v in out.items() if k != drop}, []


@pytest.fixture
def repos(tmp_path: Path) -> tuple[Path, Path]:
    return make_repos(tmp_path)


RECORDS = {"intent.yaml": (EXAMPLES / "small-model-shared.yaml").read_text()}


def run(plan: DeploymentPlan, clone: Path, render=tiny_render, records=RECORDS, **kw) -> object:
    req = PrRequest(repo=clone, command="infra pr examples/small-model-shared.yaml --repo .", **kw)
    return prepare(plan, plan_yaml(plan), render,
                   records, req)


def test_first_run_commits_on_a_new_branch_and_leaves_the_checkout_alone(planned, repos):
    _, clone = repos
    result = run(planned, clone)
    assert result.committed and result.branch == "infra/summariser"
    assert git(clone, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git(clone, "status", "--porcelain") == "" and not (clone / "deploy").exists()
    files = git(clone, "ls-tree", "-r", "--name-only", "infra/summariser").split()
    assert {"deploy/summarise/base/kustomization.yaml", "deploy/summarise/overlays/onprem-small/kustomization.yaml",
            "deploy/.infra/summariser/plan.yaml", "deploy/.infra/summariser/intent.yaml",
            "deploy/.infra/summariser/files.txt"} <= set(files)
    assert git(clone, "rev-parse", "infra/summariser~1").strip() == git(clone, "rev-parse", "main").strip()
    message = git(clone, "log", "-1", "--format=%B", "infra/summariser")
    assert message.startswith("feat(summariser): deploy on onprem-small: 2 x RTX-4090, $0.58/h")
    assert f"Plan-Fingerprint: {planned.spec.fingerprint}" in message
    assert result.body_file is not None and result.body_file.read_text() == result.body
    assert ".git" in str(result.body_file) and any("push origin infra/summariser" in s for s in result.next_steps)
    body = result.body
    assert "| summarise | Qwen/Qwen3-8B | 1 x RTX-4090 per worker (2 in all, pool rtx4090) |" in body
    # Each objective's cell is the plan's own prediction against its target, with the margin left (the figures
    # move with every refit of the performance model, the cell's form does not).
    predicted = planned.spec.services[0].allocations[0].predicted
    for metric, target in (("ttft_p99", 2000), ("tpot_p99", 80)):
        o = predicted[metric]
        assert f"{o.predicted_ms:g} of {target} ms ({o.margin:.0%})" in body
    assert "verification: not verified" in body and "First deployment" in body
    assert "status OPTIMAL" in body and planned.spec.provenance.catalog in body
    summary = re.search(r"(\d+) added, 0 changed, 0 removed \(\+(\d+) / -0 lines\)", body)
    rows = re.findall(r"^\| `[^`]+` \| added \| (\d+) \| 0 \|$", body, re.M)
    assert summary and int(summary[1]) == len(rows) >= 5 and int(summary[2]) == sum(map(int, rows))
    assert "infra pr examples/small-model-shared.yaml --repo ." in body


def test_same_inputs_make_no_new_commit_and_the_same_body(planned, repos):
    _, clone = repos
    first = run(planned, clone)
    again = run(planned, clone)
    assert not again.committed and again.commit == first.commit and again.body == first.body
    assert git(clone, "rev-list", "--count", "infra/summariser").strip() == "2"


def test_existing_branch_gets_a_commit_on_top_and_stale_files_go(planned, repos):
    _, clone = repos
    first = run(planned, clone)
    second = run(replanned(planned, 3), clone, render=lambda p: tiny_render(p, "summarise/base/service-summarise.yaml"))
    assert second.committed and git(clone, "rev-parse", "infra/summariser~1").strip() == first.commit
    files = git(clone, "ls-tree", "-r", "--name-only", "infra/summariser").split()
    assert "deploy/summarise/base/service-summarise.yaml" not in files
    assert "replicas: '3'" in git(clone, "show", "infra/summariser:deploy/summarise/base/configmap-summarise-a0.yaml")
    # Files the plan never wrote are kept.
    assert "README.md" in files


def test_plan_diff_against_the_base_branch(planned, repos):
    _, clone = repos
    run(planned, clone)
    git(clone, "merge", "-q", "--ff-only", "infra/summariser")  # the first PR is merged
    records = {"intent.yaml": RECORDS["intent.yaml"].replace("rate: 0.5/s", "rate: 0.8/s")}
    result = run(replanned(planned, 3), clone, records=records, branch="infra/summariser-more")
    body = result.body
    assert "- Cost: $0.58/h → $0.87/h (+$0.29/h, +50.0%)" in body
    assert "| summarise | RTX-4090 agg | 2 | 3 | +1 |" in body
    assert "| summarise | RTX-4090 | 2 | 3 | +1 |" in body
    assert "| summarise | TTFT p99 | 76% | 85% | +9 pts |" in body
    assert "-        rate: 0.5/s\n+        rate: 0.8/s" in body
    assert "0 added, 3 changed, 0 removed" in body
    assert "| `deploy/summarise/base/configmap-summarise-a0.yaml` | changed | 1 | 1 |" in body
    assert git(clone, "log", "-1", "--format=%s", "infra/summariser-more").startswith(
        "chore(summariser): re-plan on onprem-small: 3 x RTX-4090, $0.87/h (was $0.58/h)")


def test_dirty_tree_is_refused_unless_allowed(planned, repos):
    _, clone = repos
    (clone / "notes.txt").write_text("mine\n")
    with pytest.raises(InfraError) as err:
        run(planned, clone)
    text = str(err.value)
    assert "uncommitted changes (notes.txt)" in text and "--allow-dirty" in text and str(clone) in text
    result = run(planned, clone, allow_dirty=True)
    assert result.committed and (clone / "notes.txt").read_text() == "mine\n"
    assert "notes.txt" not in git(clone, "ls-tree", "-r", "--name-only", "infra/summariser")


@pytest.mark.parametrize("root", ["../outside", "/etc", "a/../../b", ".git/hooks", "a/./b"])
def test_roots_outside_the_repository_are_refused(planned, repos, root):
    _, clone = repos
    with pytest.raises(InfraError, match="--root"):
        run(planned, clone, root=root)


def test_symlinks_that_leave_the_root_are_refused(planned, repos, tmp_path):
    _, clone = repos
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (clone / "deploy").symlink_to(outside)
    git(clone, "add", "deploy")
    git(clone, "commit", "-q", "-m", "link")
    with pytest.raises(InfraError, match="symbolic link"):
        run(planned, clone)
    assert list(outside.iterdir()) == []


def test_a_link_committed_inside_the_root_is_refused(planned, repos):
    _, clone = repos
    (clone / "deploy").mkdir()
    (clone / "deploy" / "summarise").symlink_to("/tmp")
    git(clone, "add", "deploy")
    git(clone, "commit", "-q", "-m", "link")
    with pytest.raises(InfraError, match="deploy/summarise is a symbolic link in the branch"):
        run(planned, clone)


@pytest.mark.parametrize("path", ["../evil.yaml", "summarise/../../evil.yaml", "/abs.yaml", "other/x.yaml"])
def test_rendered_paths_outside_the_services_are_refused(planned, repos, path):
    _, clone = repos
    with pytest.raises(InfraError, match="rendered file"):
        run(planned, clone, render=lambda p: ({**tiny_render(p)[0], path: "x\n"}, []))


def test_files_of_another_plan_are_not_taken_over(planned, repos):
    _, clone = repos
    commit_file(clone, "deploy/.infra/other/files.txt", "summarise/base/kustomization.yaml\n")
    with pytest.raises(InfraError, match="belongs to plan 'other'"):
        run(planned, clone)


def test_diverged_branch_is_refused_never_forced(planned, repos, tmp_path):
    remote, clone = repos
    run(planned, clone, push=True)
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", "-b", "infra/summariser", str(remote), str(other)], check=True)
    git(other, "-c", "user.name=R", "-c", "user.email=r@x", "commit", "-q", "--allow-empty", "-m", "reviewer")
    git(other, "push", "-q", "origin", "infra/summariser")
    git(clone, "-c", "user.name=R", "-c", "user.email=r@x", "commit", "-q", "--allow-empty", "-m", "local")
    git(clone, "branch", "-f", "infra/summariser", "HEAD")  # the local branch now has a commit the remote lacks
    git(clone, "reset", "-q", "--hard", "HEAD~1")
    with pytest.raises(InfraError, match="diverged"):
        run(replanned(planned, 3), clone, push=True)


def test_reviewer_commits_on_the_remote_branch_are_kept(planned, repos, tmp_path):
    remote, clone = repos
    run(planned, clone, push=True)
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", "-b", "infra/summariser", str(remote), str(other)], check=True)
    (other / "REVIEW.md").write_text("looked at it\n")
    git(other, "add", "REVIEW.md")
    git(other, "-c", "user.name=R", "-c", "user.email=r@x", "commit", "-q", "-m", "review note")
    git(other, "push", "-q", "origin", "infra/summariser")
    result = run(replanned(planned, 3), clone, push=True)
    assert result.committed and result.pushed
    tip = git(Path(remote), "rev-parse", "infra/summariser").strip()
    assert tip == result.commit
    assert "REVIEW.md" in git(Path(remote), "ls-tree", "-r", "--name-only", tip)


def test_push_opens_then_updates_the_pull_request_and_never_leaks_the_token(planned, repos, monkeypatch, capfd):
    remote, clone = repos
    with GitHubServer(TOKEN, "acme/deploy", str(remote)) as gh:
        first = run(planned, clone, push=True, token=TOKEN, github="acme/deploy", github_api=gh.url)
        assert first.pr_action == "created" and first.pr_number == 1 and first.body_file is None
        assert git(Path(remote), "rev-parse", "infra/summariser").strip() == first.commit
        second = run(replanned(planned, 3), clone, push=True, token=TOKEN, github="acme/deploy", github_api=gh.url)
        assert second.pr_action == "updated" and second.pr_number == 1
        assert len(gh.state.pulls) == 1 and gh.state.pulls[0]["body"] == second.body
        assert gh.state.pulls[0]["title"].startswith("infra: deploy summariser on onprem-small (3 x RTX-4090")
        assert all(r["authorization"] == f"token {TOKEN}" for r in gh.state.requests)
        listing = [r for r in gh.state.requests if r["method"] == "GET" and r["path"].endswith("/pulls")]
        assert listing[0]["query"]["head"] == ["acme:infra/summariser"] and listing[0]["query"]["base"] == ["main"]
    out, err = capfd.readouterr()
    haystacks = [out, err, first.body, second.body, (clone / ".git" / "config").read_text(),
                 git(clone, "log", "--all", "-p"), git(Path(remote), "log", "--all", "-p")]
    assert not any(TOKEN in h for h in haystacks)


def test_push_without_a_token_pushes_and_says_what_to_do(planned, repos):
    remote, clone = repos
    result = run(planned, clone, push=True)
    assert result.pushed and result.pr_number is None and result.body_file.exists()
    assert git(Path(remote), "rev-parse", "infra/summariser").strip() == result.commit
    assert any("GITHUB_TOKEN" in step for step in result.next_steps)


def test_github_errors_are_one_line_without_the_token(planned, repos):
    remote, clone = repos
    with GitHubServer("another-token", "acme/deploy", str(remote)) as gh, pytest.raises(EndpointError) as err:
        run(planned, clone, push=True, token=TOKEN, github="acme/deploy", github_api=gh.url)
    text = str(err.value)
    assert "401 Bad credentials" in text and "GITHUB_TOKEN" in text and TOKEN not in text and "\n" not in text


def test_push_failure_names_the_repository_and_the_fix(planned, repos, tmp_path):
    _, clone = repos
    git(clone, "remote", "set-url", "origin", str(tmp_path / "gone.git"))
    with pytest.raises(EndpointError) as err:
        run(planned, clone, push=True)
    text = str(err.value)
    assert str(clone) in text and "To fix:" in text and "\n" not in text


def test_argocd_applications_point_at_the_overlays_without_credentials(planned, repos):
    _, clone = repos
    git(clone, "remote", "set-url", "origin", f"https://bot:{TOKEN}@github.com/acme/deploy.git")
    result = run(planned, clone, sync="argocd", cluster="prod-eu")
    app = git(clone, "show", "infra/summariser:deploy/clusters/prod-eu/summarise.yaml")
    assert "kind: Application" in app and "repoURL: https://github.com/acme/deploy.git" in app
    assert "path: deploy/summarise/overlays/prod-eu" in app and "namespace: default" in app and TOKEN not in app
    files = git(clone, "ls-tree", "-r", "--name-only", "infra/summariser")
    assert "deploy/summarise/overlays/prod-eu/kustomization.yaml" in files and "onprem-small" not in files
    assert TOKEN not in result.body


def test_flux_kustomizations_reference_the_bootstrap_source(planned, repos):
    _, clone = repos
    result = run(planned, clone, sync="flux", root="apps",
                 render=lambda p: (tiny_render(p)[0], ["create the Secret hf-token in namespace default"]))
    assert "To act on before merging:\n\n- create the Secret hf-token in namespace default" in result.body
    obj = git(clone, "show", "infra/summariser:apps/clusters/onprem-small/summarise.yaml")
    assert "kind: Kustomization" in obj and "path: ./apps/summarise/overlays/onprem-small" in obj
    assert "name: flux-system" in obj and "prune: true" in obj


def test_checked_out_branch_moves_forward_with_its_files(planned, repos):
    _, clone = repos
    run(planned, clone)
    git(clone, "checkout", "-q", "infra/summariser")
    result = run(replanned(planned, 3), clone)
    assert result.committed and git(clone, "status", "--porcelain") == ""
    assert "replicas: '3'" in (clone / "deploy/summarise/base/configmap-summarise-a0.yaml").read_text()


def test_nothing_to_do_when_the_base_already_holds_the_plan(planned, repos):
    _, clone = repos
    run(planned, clone)
    git(clone, "merge", "-q", "--ff-only", "infra/summariser")
    git(clone, "branch", "-q", "-D", "infra/summariser")
    result = run(planned, clone)
    assert result.commit is None and not result.committed
    assert "infra/summariser" not in git(clone, "branch", "--list")


def test_missing_base_and_bad_names_are_clear(planned, repos, tmp_path):
    _, clone = repos
    with pytest.raises(InfraError, match="base branch 'trunk' not found"):
        run(planned, clone, base="trunk")
    for bad in ("bad..name", "@", "refs/heads/main", "HEAD", "me@{-1}"):
        with pytest.raises(InfraError, match="not a valid branch name"):
            run(planned, clone, branch=bad)
    with pytest.raises(InfraError, match="not a DNS-1123 label"):
        run(planned, clone, cluster="Prod_EU")
    with pytest.raises(InfraError, match="is the base branch"):
        run(planned, clone, branch="main")
    with pytest.raises(InfraError, match="not inside a git work tree"):
        run(planned, tmp_path)


def test_public_url_drops_credentials():
    assert public_url(f"https://x-access-token:{TOKEN}@ghe.example:8443/a/b.git") == "https://ghe.example:8443/a/b.git"
    assert public_url("git@github.com:acme/deploy.git") == "git@github.com:acme/deploy.git"


def test_body_is_deterministic_and_fences_backticks(planned):
    records = [Record("intent.yaml", "a: 1\n", "a: 1\n# ```` odd\n")]
    kw = {"cluster": "c", "base": "main", "previous": planned, "previous_error": None, "records": records,
          "files": {}, "command": "infra pr x --repo ."}
    body = pr_body(planned, **kw)
    assert body == pr_body(planned, **kw)
    assert "`````diff" in body and "Replicas, devices and SLO margins: as on `main`" in body


def test_dirty_repo_is_refused_before_planning(repos):
    from infra.api import open_pr

    _, clone = repos
    (clone / "dirty").write_text("x")
    with pytest.raises(InfraError, match="uncommitted"):
        open_pr(EXAMPLES / "small-model-shared.yaml", clone)


def test_a_plan_from_other_inputs_is_refused_with_its_line(planned, repos, tmp_path):
    from infra.api import open_pr

    _, clone = repos
    path = tmp_path / "plan.yaml"
    path.write_text(plan_yaml(replanned(planned, 3)))
    with pytest.raises(InfraError) as err:
        open_pr(EXAMPLES / "small-model-shared.yaml", clone, plan_path=path)
    text = str(err.value)
    assert f"{path}:6:" in text and "spec.fingerprint" in text and "other inputs" in text and "To fix" in text


def test_push_credentials_come_from_the_environment_only(repos):
    """The helper that `git push` gets hands the token to git for HTTPS without it being in any config file."""
    from infra.gitops.git import token_env

    _, clone = repos
    env = {**os.environ, **token_env(TOKEN), "GIT_TERMINAL_PROMPT": "0"}
    out = subprocess.run(["git", "-C", str(clone), "credential", "fill"], input="protocol=https\nhost=ghe.example\n\n",
                         capture_output=True, text=True, env=env, check=True).stdout
    assert f"password={TOKEN}" in out and "username=x-access-token" in out
    assert TOKEN not in (clone / ".git" / "config").read_text()
    assert TOKEN not in token_env(TOKEN)["GIT_CONFIG_VALUE_1"]


def test_github_repository_from_remote_urls():
    from infra.gitops.github import repo_from_remote

    assert repo_from_remote("git@github.com:acme/deploy.git") == "acme/deploy"
    assert repo_from_remote("https://github.com/acme/deploy") == "acme/deploy"
    assert repo_from_remote("https://ghe.example/acme/deploy.git") is None and repo_from_remote(None) is None


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_renamed_overlay_builds_with_kustomize(planned, repos, tmp_path):
    """The real renderer's tree, placed under a root with the overlay renamed, still builds."""
    from infra.render import render_tree

    _, clone = repos

    def render(p):
        rendered = render_tree(p)
        return rendered.files, rendered.notes

    run(planned, clone, render=render, cluster="prod-eu", sync="argocd")
    tree = tmp_path / "tree"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(clone), "archive", "infra/summariser", "deploy"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    out = subprocess.run(["kubectl", "kustomize", str(tree / "deploy/summarise/overlays/prod-eu")], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert "kind: Deployment" in out.stdout and "infra.dev/plan-fingerprint" in out.stdout


def test_a_plan_name_that_would_steer_a_path_is_refused(planned, repos):
    _, clone = repos
    data = planned.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["metadata"]["name"] = "../../escape"
    with pytest.raises(ValidationError, match="metadata.name"):
        DeploymentPlan.model_validate(data)
    # A plan built in code skips validation; the PR path still refuses the name on its own.
    forged = planned.model_copy(update={"metadata": planned.metadata.model_copy(update={"name": "../../escape"})})
    with pytest.raises(InfraError, match="plan name '../../escape' is not a DNS-1123 label"):
        run(forged, clone)


def test_an_unreadable_plan_on_the_base_branch_is_said_not_fatal(planned, repos):
    _, clone = repos
    commit_file(clone, "deploy/.infra/summariser/plan.yaml", "kind: DeploymentPlan\nspec: 3\n")
    result = run(planned, clone)
    assert "The plan on `main` could not be read (deploy/.infra/summariser/plan.yaml:" in result.body
    assert "| `deploy/.infra/summariser/plan.yaml` | changed |" in result.body


def test_an_edited_file_list_cannot_remove_files_outside_the_root(planned, repos):
    _, clone = repos
    run(planned, clone)
    git(clone, "checkout", "-q", "infra/summariser")
    listing = clone / "deploy" / ".infra" / "summariser" / "files.txt"
    listing.write_text(listing.read_text() + "../README.md\n")
    git(clone, "commit", "-q", "-am", "edit list")
    with pytest.raises(InfraError, match="listed file '../README.md'"):
        run(replanned(planned, 3), clone)
    assert (clone / "README.md").exists()


def test_github_enterprise_api_path(planned, repos):
    remote, clone = repos
    with GitHubServer(TOKEN, "acme/deploy", str(remote), api_path="/api/v3") as gh:
        result = run(planned, clone, push=True, token=TOKEN, github="acme/deploy", github_api=gh.url)
        assert result.pr_action == "created" and gh.url.endswith("/api/v3")
        assert gh.state.requests and all(r["path"].startswith("/api/v3/repos/acme/deploy") for r in gh.state.requests)


def test_a_branch_checked_out_in_another_work_tree_is_left_alone(planned, repos, tmp_path):
    _, clone = repos
    first = run(planned, clone)
    git(clone, "worktree", "add", "-q", str(tmp_path / "linked"), "infra/summariser")
    with pytest.raises(InfraError, match="checked out in another work tree"):
        run(replanned(planned, 3), clone)
    assert git(clone, "rev-parse", "infra/summariser").strip() == first.commit


@pytest.mark.parametrize("written", [
    "spec:\n  cluster: {profile: ../p/x.yaml, other: 1}  # the lab\n",
    "spec:\n  cluster:\n    profile: '../p/x.yaml'   # the lab\n",
    'spec:\n  cluster:\n    profile: "../p/x.yaml"\n',
])
def test_a_rewritten_reference_keeps_every_other_byte(written):
    from infra.gitops.inputs import _rewrite
    from infra.intent.yamlio import load_yaml

    out = _rewrite(written, "intent.yaml", {("spec", "cluster", "profile"): "inputs/x.yaml"})
    assert load_yaml(out, "intent.yaml")[0]["spec"]["cluster"]["profile"] == "inputs/x.yaml"
    quoted = next(q for q in ("'../p/x.yaml'", '"../p/x.yaml"', "../p/x.yaml") if q in written)
    assert out == written.replace(quoted, "inputs/x.yaml")
    odd = _rewrite(written, "intent.yaml", {("spec", "cluster", "profile"): "inputs/a b: c.yaml"})
    assert load_yaml(odd, "intent.yaml")[0]["spec"]["cluster"]["profile"] == "inputs/a b: c.yaml"
