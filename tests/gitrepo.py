"""Git repositories for tests: a bare remote with one commit on main, and a clone of it with an identity."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True).stdout


def make_repos(tmp_path: Path) -> tuple[Path, Path]:
    """(bare remote, clone) under `tmp_path`; main holds a README and is pushed."""
    remote, clone = tmp_path / "remote.git", tmp_path / "clone"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True, capture_output=True)
    git(clone, "config", "user.name", "Deployer")
    git(clone, "config", "user.email", "deployer@example.com")
    (clone / "README.md").write_text("deployments\n")
    git(clone, "add", "README.md")
    git(clone, "commit", "-q", "-m", "init")
    git(clone, "push", "-q", "origin", "main")
    return remote, clone


def commit_file(clone: Path, rel: str, text: str, message: str = "edit") -> None:
    """Write `rel` in the clone and commit it on the current branch."""
    path = clone / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    git(clone, "add", rel)
    git(clone, "commit", "-q", "-m", message)
