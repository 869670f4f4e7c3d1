"""Keeping every write inside the configured root of the GitOps repository.

A path is refused when it is absolute, climbs with `..`, is not in normal form, or passes through a symbolic link
(in the working tree or in the commit the branch builds on) or through a file where a directory is needed.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from infra.errors import InfraError, Location, Problem
from infra.gitops.git import Git

STATE_DIR = ".infra"
"""Under the root: `.infra/<plan name>/` keeps the plan, the intent and the list of files it owns."""
LINK_MODE = "120000"
TREE_MODE = "040000"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def clean_relative(path: str, what: str, where: str, allow_top: bool = False) -> str:
    """`path` as a normal relative POSIX path, or a one-line error naming `what` and `where` it came from."""
    if not path:
        raise InfraError(Problem(f"{what} is empty", Location(where),
                                 "name a directory of the repository (e.g. deploy), or '.' for its top"))
    p = path.rstrip("/") or "."
    if p == "." and allow_top:
        return p
    parts = p.split("/")
    if p.startswith("/") or "\\" in p or any(part in ("", ".", "..") for part in parts):
        raise InfraError(Problem(f"{what} {path!r} is not a plain relative path inside the repository",
                                 Location(where), "use a relative path without '..' or '.' (e.g. deploy)"))
    if ".git" in parts:
        raise InfraError(Problem(f"{what} {path!r} points into .git", Location(where),
                                 "choose a directory of the work tree"))
    return p


def check_name(name: str, what: str, where: str) -> str:
    """A DNS-1123 label (cluster, service): it becomes a directory and an object name."""
    if not _NAME.match(name) or len(name) > 63:
        raise InfraError(Problem(f"{what} {name!r} is not a DNS-1123 label", Location(where),
                                 "use lowercase letters, digits and '-', at most 63 characters"))
    return name


def check_root_on_disk(git: Git, root: str) -> None:
    """The root, as it exists in the work tree, must not leave the repository through a symbolic link."""
    top = git.top
    current = top
    for part in PurePosixPath(root).parts:
        current = current / part
        if current.is_symlink():
            target = current.resolve()
            inside = target == top or top in target.parents
            raise InfraError(Problem(
                f"{current.relative_to(top)} is a symbolic link (to {target}"
                f"{'' if inside else ', outside the repository'})", Location(str(top)),
                "point --root at a real directory of the repository"))
    resolved = (top / root).resolve()
    if resolved != top and top not in resolved.parents:
        raise InfraError(Problem(f"--root {root!r} resolves outside the repository ({resolved})", Location(str(top)),
                                 "point --root at a directory inside the repository"))


def check_tree_paths(git: Git, commit: str | None, paths: list[str]) -> None:
    """No path to be written may pass through a link or a file in `commit`'s tree, nor replace a directory."""
    if commit is None or not paths:
        return
    prefixes = sorted({str(parent) for p in paths for parent in PurePosixPath(p).parents if str(parent) != "."})
    modes = git.entries(commit, prefixes + sorted(paths))
    for prefix in prefixes:
        mode = modes.get(prefix)
        if mode == LINK_MODE:
            raise InfraError(Problem(f"{prefix} is a symbolic link in the branch; writing through it could leave "
                                     "the root", Location(str(git.top)),
                                     f"replace the link {prefix} with a real directory, or choose another --root"))
        if mode is not None and mode != TREE_MODE:
            raise InfraError(Problem(f"{prefix} is a file in the branch where a directory is needed",
                                     Location(str(git.top)), f"move {prefix} away, or choose another --root"))
    for path in paths:
        mode = modes.get(path)
        if mode == LINK_MODE:
            raise InfraError(Problem(f"{path} is a symbolic link in the branch", Location(str(git.top)),
                                     f"replace the link {path} with a regular file"))
        if mode == TREE_MODE:
            raise InfraError(Problem(f"{path} is a directory in the branch where a file is needed",
                                     Location(str(git.top)), f"move {path} away"))


def inside(root: str, rel: str) -> str:
    """`rel` (already clean) joined under `root`."""
    return rel if root == "." else f"{root}/{rel}"


def under(root: str, path: str) -> bool:
    return root == "." or path == root or path.startswith(root + "/")
