"""From a plan to a reviewable pull request: place the files, commit on the PR branch, push, open or update the PR.

Safety rules, in the order they are checked:
- a working tree with uncommitted changes is refused (they would not be part of the PR) unless allowed;
- every path written stays under the root: no `..`, no absolute path, no symbolic link on the way;
- the branch only moves forward: an existing branch gets a new commit on top, a diverged one is refused, and a
  push is never forced;
- the same inputs give the same tree, and an unchanged tree makes no commit;
- a token only ever travels in a child process's environment; it is redacted from every message.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from infra.errors import InfraError, IntentError, Location, Problem
from infra.files import write_file
from infra.gitops import body as pr_body
from infra.gitops.git import Git, token_env
from infra.gitops.github import check_full_name, open_or_update, repo_from_remote
from infra.gitops.inputs import kept_inputs
from infra.gitops.layout import owned_from, place_rendered, state_dir, state_files, sync_objects
from infra.gitops.paths import STATE_DIR, check_name, check_root_on_disk, check_tree_paths, clean_relative, inside
from infra.intent.resolve import ResolvedIntent
from infra.intent.yamlio import load_yaml, read_text
from infra.planner.types import DeploymentPlan

Renderer = Callable[[DeploymentPlan], tuple[dict[str, str], list[str]]]
"""Plan -> (manifest files in the MANIFESTS.md layout, notes the user must act on)."""


@dataclass(frozen=True)
class PrRequest:
    """Everything `infra pr` was asked, besides the plan."""

    repo: Path
    root: str = "deploy"
    cluster: str | None = None
    base: str = "main"
    branch: str | None = None
    push: bool = False
    github: str | None = None
    github_api: str = "https://api.github.com"
    allow_dirty: bool = False
    sync: str | None = None
    """`argocd` or `flux`: also write an Application / Kustomization per overlay."""
    remote: str = "origin"
    body_file: Path | None = None
    force: bool = False
    """Replace a `body_file` that holds something else."""
    token: str | None = None
    command: str = ""
    """The command line that reproduces this pull request (shown in the body and the commit)."""


@dataclass(frozen=True)
class PrResult:
    branch: str
    base: str
    commit: str | None
    """The branch tip after the run (None when nothing needed committing and the branch does not exist)."""
    committed: bool
    title: str
    body: str
    files: dict[str, tuple[str, int, int]]
    body_file: Path | None = None
    pushed: bool = False
    pr_number: int | None = None
    pr_url: str | None = None
    pr_action: str | None = None
    next_steps: list[str] = field(default_factory=list)


def public_url(url: str | None) -> str | None:
    """A remote URL without user name or password (it is written into files and shown to people)."""
    if not url or "://" not in url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def reproduce_command(intent: str, req: PrRequest, catalog_dirs: tuple[str, ...] = (),
                      calibration: str | None = None) -> str:
    """`infra pr ...` with the options that shape the result (not the publishing ones)."""
    args = ["infra", "pr", intent, "--repo", str(req.repo)]
    if calibration:
        args += ["--calibration", calibration]
    if req.root != "deploy":
        args += ["--root", req.root]
    if req.cluster:
        args += ["--cluster", req.cluster]
    if req.base != "main":
        args += ["--base", req.base]
    if req.branch:
        args += ["--branch", req.branch]
    if req.sync:
        args.append(f"--{req.sync}")
    for d in catalog_dirs:
        args += ["--catalog", d]
    return shlex.join(args)


def _dirty_refusal(git: Git, lines: list[str]) -> InfraError:
    shown = ", ".join(line[3:] for line in lines[:3]) + (f" and {len(lines) - 3} more" if len(lines) > 3 else "")
    return InfraError(Problem(f"the working tree has uncommitted changes ({shown}); the pull request is built from "
                              "the base branch and would not include them", Location(str(git.top)),
                              "commit or stash them, or pass --allow-dirty"))


def _check_branch_name(git: Git, branch: str, flag: str) -> str:
    # `check-ref-format --branch` resolves `@` (and `@{-1}`) to a branch that exists, and takes a full ref
    # (`refs/heads/main`) as a name under refs/heads/: either would name another branch than the one written.
    if (not git.ok("check-ref-format", "--branch", branch) or branch.startswith(("-", "refs/")) or "@" in branch
            or branch == "HEAD"):
        raise InfraError(Problem(f"{flag} {branch!r} is not a valid branch name", Location(flag),
                                 "use letters, digits, '-', '_' and '/' (e.g. infra/chat)"))
    return branch


def _fetch(git: Git, req: PrRequest, branch: str) -> None:
    """Bring the remote's base and PR branch into remote-tracking refs (the PR is judged against them)."""
    if git.remote_url(req.remote) is None:
        raise InfraError(Problem(f"--push needs a remote named {req.remote!r}, and the repository has none",
                                 Location(str(git.top)), f"add it: git -C {git.top} remote add {req.remote} URL"))
    fix = f"check that {req.remote} is reachable and that its credentials work (git -C {git.top} fetch)"
    git.run("fetch", "--quiet", "--no-tags", req.remote,
            f"+refs/heads/{req.base}:refs/remotes/{req.remote}/{req.base}", fix=fix)
    heads = git.run("ls-remote", "--heads", req.remote, f"refs/heads/{branch}", fix=fix)
    if heads.strip():
        git.run("fetch", "--quiet", "--no-tags", req.remote, f"+refs/heads/{branch}:refs/remotes/{req.remote}/{branch}",
                fix=fix)


def _parent(git: Git, req: PrRequest, branch: str, base: str) -> tuple[str, str | None]:
    """The commit the new one goes on (the branch tip, else the base) and the local branch's current tip."""
    local = git.commit_of(f"refs/heads/{branch}")
    remote = git.commit_of(f"refs/remotes/{req.remote}/{branch}")
    if local and remote and local != remote:
        if git.ok("merge-base", "--is-ancestor", local, remote):
            return remote, local
        if not git.ok("merge-base", "--is-ancestor", remote, local):
            raise InfraError(Problem(f"branch {branch} and {req.remote}/{branch} have diverged; it is never "
                                     "force-pushed", Location(str(git.top)),
                                     f"reconcile them (git -C {git.top} pull --rebase {req.remote} {branch}) or "
                                     "pass --branch with a new name"))
    return local or remote or base, local


def _move_branch(git: Git, branch: str, new: str, old: str | None) -> None:
    """Move the local branch forward to `new`, updating the checkout when this work tree has it checked out."""
    if old == new:
        return
    trees = git.checked_out(branch)
    here = [t for t in trees if t.resolve() == git.top]
    if trees and not here:
        raise InfraError(Problem(f"branch {branch} is checked out in another work tree ({trees[0]})",
                                 Location(str(git.top)), "switch that work tree to another branch, or pass --branch"))
    if here:
        git.run("merge", "--ff-only", "--quiet", new,
                fix=f"commit or stash the local changes that conflict with {branch}, then run again")
        return
    git.run("update-ref", "-m", "infra pr", f"refs/heads/{branch}", new, old or "0" * 40)


def _read_previous(git: Git, commit: str, path: str) -> tuple[DeploymentPlan | None, str | None]:
    text = git.show(commit, path)
    if text is None:
        return None, None
    from pydantic import ValidationError as PydanticValidationError


    try:
        data, _ = load_yaml(text, path)
        return DeploymentPlan.model_validate(data), None
    except (InfraError, PydanticValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, f"{path}: {first}"


def _foreign_owners(git: Git, commit: str, root: str, name: str, paths: set[str]) -> None:
    """Refuse to write files another plan in the same root owns."""
    state = inside(root, STATE_DIR)
    depth = len(state.split("/")) + 2
    for listing in git.files_under(commit, state):
        parts = listing.split("/")
        # Only `.infra/<plan>/files.txt` lists a plan's files; a kept input deeper down may share the name.
        if len(parts) != depth or parts[-1] != "files.txt" or parts[-2] == name:
            continue
        theirs = {inside(root, p) for p in owned_from(git.show(commit, listing), listing)}
        clash = sorted(theirs & paths)
        if clash:
            raise InfraError(Problem(f"{clash[0]} belongs to plan {parts[-2]!r} (listed in {listing})",
                                     Location(str(git.top)), "give the service another name, or use another --root"))


def check_fingerprint(plan: DeploymentPlan, expected: str, plan_path: str | Path, intent: str) -> None:
    """Refuse a plan made from other inputs than the intent's (intent, cluster, catalog, calibration)."""
    if plan.spec.fingerprint == expected:
        return

    _, smap = load_yaml(read_text(Path(plan_path), "plan"), str(plan_path))
    raise IntentError(Problem(
        f"plan was made from other inputs than {intent} ({plan.spec.fingerprint[:19]}…, the intent, cluster, "
        f"catalog and calibration give {expected[:19]}…)", smap.locate(("spec", "fingerprint")),
        f"plan again (infra plan {intent} -o DIR) or leave out --plan"))


def intent_records(resolved: ResolvedIntent) -> dict[str, str]:
    """The intent and every file it reads (cluster profile, calibration, traces, config.json models), laid out so
    that the kept copy checks in place; the next pull request diffs against them."""

    return kept_inputs(resolved)


def preflight(req: PrRequest) -> tuple[Git, str]:
    """The repository and the clean root, after the checks that need no plan (run before planning, which takes
    seconds): a git work tree, a root inside it, no uncommitted changes unless allowed."""
    git = Git.open(req.repo, (req.token,) if req.token else ())
    root = clean_relative(req.root, "--root", "--root", allow_top=True)
    check_root_on_disk(git, root)
    if req.body_file is not None:
        write_file(req.body_file, None, force=req.force)
    if not req.allow_dirty:
        dirty = git.status()
        if dirty:
            raise _dirty_refusal(git, dirty)
    return git, root


def prepare(plan: DeploymentPlan, plan_text: str, render: Renderer, records: dict[str, str],
            req: PrRequest) -> PrResult:
    """Write the plan's files on the PR branch (a new commit only when something changed), then push and open or
    update the PR as asked; without publishing, write the body to a file and say what to run next."""
    git, root = preflight(req)
    # The plan's name and cluster become directories: a hand-edited plan must not steer a path.
    check_name(plan.metadata.name, "plan name", "metadata.name")
    cluster = check_name(req.cluster or plan.spec.cluster.name, "--cluster", "--cluster")
    branch = _check_branch_name(git, req.branch or f"infra/{plan.metadata.name}", "--branch")
    _check_branch_name(git, req.base, "--base")
    if branch == req.base:
        raise InfraError(Problem(f"--branch {branch!r} is the base branch; changes go to a branch of their own for "
                                 "review", Location("--branch"), "leave out --branch, or name another branch"))
    if req.push:
        _fetch(git, req, branch)
    # After a fetch the remote's base is the truth; offline, the clone's own base branch is.
    refs = [f"refs/remotes/{req.remote}/{req.base}", f"refs/heads/{req.base}"]
    base = next(filter(None, map(git.commit_of, refs if req.push else refs[::-1])), None)
    if base is None:
        raise InfraError(Problem(f"base branch {req.base!r} not found in {git.top}", Location(str(git.top)),
                                 "pass --base with the branch pull requests go into (e.g. main)"))
    parent, local = _parent(git, req, branch, base)

    rendered, notes = render(plan)
    manifests = place_rendered(plan, rendered, cluster)
    if req.sync:
        manifests.update(sync_objects(plan, cluster=cluster, root=root, flavour=req.sync,
                                      repo_url=public_url(git.remote_url(req.remote)), revision=req.base))
    files = state_files(plan, plan_text, records, list(manifests))
    files.update(manifests)
    writes = {inside(root, p): text for p, text in files.items()}
    sdir = inside(root, state_dir(plan))
    old_owned = {inside(root, p) for p in owned_from(git.show(parent, f"{sdir}/files.txt"), f"{sdir}/files.txt")}
    stale_records = set(git.files_under(parent, sdir))
    removes = sorted((old_owned | stale_records) - set(writes))
    _foreign_owners(git, parent, root, plan.metadata.name, set(writes))
    check_tree_paths(git, parent, sorted(writes))

    previous, previous_error = _read_previous(git, base, f"{sdir}/plan.yaml")
    tree = git.build_tree(parent, writes, removes)
    committed = tree != git.tree_of(parent)
    head: str | None = parent
    if committed:
        message = pr_body.commit_message(plan, cluster, previous, req.command)
        head = git.commit_tree(tree, parent, message)
        _move_branch(git, branch, head, local)
    elif parent == base and local is None and git.commit_of(f"refs/remotes/{req.remote}/{branch}") is None:
        head = None  # the base already holds exactly this: no branch, no pull request
    elif parent != local:
        _move_branch(git, branch, parent, local)

    merge_base = git.run("merge-base", base, head).strip() if head else base
    changes = git.numstat(merge_base, head or base, root)
    record_list = [pr_body.Record(name, git.show(base, f"{sdir}/{name}"), text) for name, text in
                   sorted(records.items(), key=lambda kv: (kv[0] != "intent.yaml", kv[0]))]
    title = pr_body.title(plan, cluster)
    text = pr_body.pr_body(plan, cluster=cluster, base=req.base, previous=previous, previous_error=previous_error,
                           records=record_list, files=changes, command=req.command, notes=notes)
    result = PrResult(branch, req.base, head, committed, title, text, changes)
    if head is None:
        return result
    return _publish(git, req, result)


def _with(result: PrResult, **changes: object) -> PrResult:
    from dataclasses import replace

    return replace(result, **changes)


def _publish(git: Git, req: PrRequest, result: PrResult) -> PrResult:
    branch = result.branch
    pushed = False
    if req.push:
        env = token_env(req.token) if req.token else {}
        git.run("push", "--quiet", "--porcelain", req.remote, f"refs/heads/{branch}:refs/heads/{branch}",
                extra_env=env, fix=f"check the remote's credentials, or fetch {branch} and run again (a push is "
                                   "never forced)")
        pushed = True
    full_name = req.github
    if full_name is None and req.push:

        full_name = repo_from_remote(git.remote_url(req.remote))
    if pushed and req.token and full_name:

        pr = open_or_update(api_url=req.github_api, token=req.token, full_name=check_full_name(full_name),
                            head=branch, base=req.base, title=result.title, body=result.body)
        return _with(result, pushed=True, pr_number=pr.number, pr_url=pr.url, pr_action=pr.action)
    body_file = req.body_file or git.git_dir() / "infra-pr" / (branch.replace("/", "-") + ".md")
    # Where the user named no file, the body goes to infra's own place under .git, replaced on every run.
    write_file(body_file, result.body, force=req.force or req.body_file is None)
    steps = [] if pushed else [f"git -C {shlex.quote(str(git.top))} push {req.remote} {branch}"]
    why = ("set GITHUB_TOKEN (or GH_TOKEN) and run again with --push" if not req.token
           else "pass --github OWNER/REPO and run again with --push")
    steps.append(f"open a pull request from {branch} into {req.base} titled {result.title!r} with the body in "
                 f"{body_file} (or {why})")
    return _with(result, pushed=pushed, body_file=body_file, next_steps=steps)
