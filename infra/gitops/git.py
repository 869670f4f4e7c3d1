"""Git through the `git` binary: reading refs and trees, building a commit without touching the working tree, and
pushing without force.

Commits are made with plumbing (a private index file, `write-tree`, `commit-tree`) so that the user's checkout,
index and uncommitted edits are never read or changed; the branch ref then moves only forward. Every failure is
one line that names the repository and says how to fix it, with any secret redacted.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from infra.errors import EndpointError, InfraError, Location, Problem

ZERO = "0" * 40
GIT_TIMEOUT_S = 120


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """`text` with every secret replaced by `***`."""
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text


@dataclass
class Git:
    """One repository, addressed by its top-level directory."""

    top: Path
    secrets: tuple[str, ...] = ()
    """Strings redacted from every message (a token)."""

    @classmethod
    def open(cls, path: str | Path, secrets: tuple[str, ...] = ()) -> Git:
        """The repository containing `path`; a clear error when there is none."""
        path = Path(path)
        if not path.is_dir():
            raise InfraError(Problem(f"repository {path} does not exist or is not a directory",
                                     Location(str(path)), "give --repo the path of a git clone"))
        out = _run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], {})
        if out.returncode != 0:
            raise InfraError(Problem(f"{path} is not inside a git work tree", Location(str(path)),
                                     "clone the GitOps repository and give its path to --repo"))
        return cls(Path(out.stdout.strip()).resolve(), secrets)

    def run(self, *args: str, input: str | None = None, fix: str = "", extra_env: dict[str, str] | None = None) -> str:
        """stdout of `git -C top ARGS`; an InfraError naming the repository and the fix when it fails."""
        out = _run(["git", "-C", str(self.top), *args], extra_env or {}, input=input)
        if out.returncode != 0:
            lines = [line.strip() for line in out.stderr.splitlines() if line.strip()]
            # git prints progress and hints around the reason; the reason is the `fatal:`/`error:` line.
            detail = next((x for x in lines if x.startswith(("fatal:", "error:"))), lines[0] if lines else "no message")
            detail = redact(detail.removeprefix("fatal: ").removeprefix("error: "), self.secrets)
            cls = EndpointError if args and args[0] in ("push", "fetch", "ls-remote") else InfraError
            raise cls(Problem(f"git {args[0]} failed: {detail}", Location(str(self.top)),
                              fix or "run the same git command in the repository to see what it needs"))
        return out.stdout

    def ok(self, *args: str) -> bool:
        """Whether `git ARGS` succeeds (a probe: a ref exists, one commit descends from another)."""
        return _run(["git", "-C", str(self.top), *args], {}).returncode == 0

    def commit_of(self, ref: str) -> str | None:
        """The commit a ref names, or None."""
        out = _run(["git", "-C", str(self.top), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], {})
        return out.stdout.strip() if out.returncode == 0 else None

    def show(self, commit: str, path: str) -> str | None:
        """Text of `path` at `commit`, or None when it is not there."""
        out = _run(["git", "-C", str(self.top), "cat-file", "blob", f"{commit}:{path}"], {})
        return out.stdout if out.returncode == 0 else None

    def entries(self, commit: str, paths: list[str]) -> dict[str, str]:
        """Mode of each of `paths` (files, directories or links) present in `commit`'s tree."""
        if not paths:
            return {}
        out = self.run("ls-tree", "-z", "--full-tree", commit, "--", *paths)
        modes = {}
        for rec in filter(None, out.split("\0")):
            meta, _, name = rec.partition("\t")
            modes[name] = meta.split()[0]
        return modes

    def files_under(self, commit: str, prefix: str) -> list[str]:
        """Every file path under `prefix` in `commit`'s tree."""
        out = self.run("ls-tree", "-r", "-z", "--name-only", "--full-tree", commit, "--", prefix)
        return sorted(filter(None, out.split("\0")))

    def status(self) -> list[str]:
        """Porcelain lines of uncommitted changes and untracked files."""
        return [line for line in self.run("status", "--porcelain", "--untracked-files=normal").splitlines() if line]

    def remote_url(self, remote: str) -> str | None:
        out = _run(["git", "-C", str(self.top), "remote", "get-url", remote], {})
        return out.stdout.strip() if out.returncode == 0 else None

    def git_dir(self) -> Path:
        return Path(self.run("rev-parse", "--absolute-git-dir").strip())

    def build_tree(self, parent: str | None, writes: dict[str, str], removes: list[str]) -> str:
        """Tree id of `parent`'s tree with `writes` (path -> text) put in and `removes` taken out, built in a
        private index so the user's own index and files stay as they are."""
        with tempfile.TemporaryDirectory(prefix="infra-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            if parent:
                self.run("read-tree", parent, extra_env=env)
            lines = []
            for path in sorted(removes):
                lines.append(f"0 {ZERO}\t{path}")
            for path, text in sorted(writes.items()):
                blob = self.run("hash-object", "-w", "--stdin", input=text).strip()
                lines.append(f"100644 {blob}\t{path}")
            if lines:
                self.run("update-index", "--index-info", input="\n".join(lines) + "\n", extra_env=env)
            return self.run("write-tree", extra_env=env).strip()

    def tree_of(self, commit: str) -> str:
        return self.run("rev-parse", f"{commit}^{{tree}}").strip()

    def commit_tree(self, tree: str, parent: str | None, message: str) -> str:
        args = ["commit-tree", tree] + (["-p", parent] if parent else [])
        return self.run(*args, "-F", "-", input=message,
                        fix=f"set an identity: git -C {self.top} config user.name NAME && "
                            f"git -C {self.top} config user.email EMAIL").strip()

    def checked_out(self, branch: str) -> list[Path]:
        """Work trees (this one or linked ones) that have `branch` checked out."""
        out = self.run("worktree", "list", "--porcelain")
        trees, current = [], None
        for line in out.splitlines():
            if line.startswith("worktree "):
                current = Path(line.removeprefix("worktree "))
            elif line == f"branch refs/heads/{branch}" and current is not None:
                trees.append(current)
        return trees

    def numstat(self, old: str, new: str, prefix: str) -> dict[str, tuple[str, int, int]]:
        """path -> (status A/M/D, lines added, lines removed) between two trees, under `prefix`."""
        status = {}
        out = self.run("diff-tree", "-r", "-z", "--no-renames", "--name-status", old, new, "--", prefix)
        parts = [p for p in out.split("\0") if p]
        for st, path in zip(parts[::2], parts[1::2]):
            status[path] = st[0]
        out = self.run("diff-tree", "-r", "-z", "--no-renames", "--numstat", old, new, "--", prefix)
        counts: dict[str, tuple[int, int]] = {}
        for rec in filter(None, out.split("\0")):
            added, removed, path = rec.split("\t", 2)
            counts[path] = (int(added) if added.isdigit() else 0, int(removed) if removed.isdigit() else 0)
        return {p: (s, *counts.get(p, (0, 0))) for p, s in sorted(status.items())}


def _run(cmd: list[str], env: dict[str, str], input: str | None = None) -> subprocess.CompletedProcess[str]:
    # A prompt for credentials would hang a command line tool: fail instead and say so.
    full_env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", **env}
    try:
        return subprocess.run(cmd, input=input, capture_output=True, text=True, env=full_env, check=False,
                              timeout=GIT_TIMEOUT_S, encoding="utf-8")
    except FileNotFoundError:
        raise InfraError(Problem("git is not installed", fix="install git (e.g. apt-get install git)")) from None
    except subprocess.TimeoutExpired:
        raise EndpointError(Problem(f"git {cmd[3] if len(cmd) > 3 else ''} took over {GIT_TIMEOUT_S} s",
                                    Location(cmd[2] if len(cmd) > 2 else None),
                                    "check the network and the remote, then run again")) from None


def token_env(token: str) -> dict[str, str]:
    """Environment that lets one git process authenticate over HTTPS with `token`, without the token appearing in
    a command line, a remote URL or any config file: a credential helper (set through GIT_CONFIG_* variables)
    reads it from the process environment."""
    helper = '!f() { echo username=x-access-token; echo "password=$INFRA_GIT_TOKEN"; }; f'
    return {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "credential.helper", "GIT_CONFIG_VALUE_0": "",
            "GIT_CONFIG_KEY_1": "credential.helper", "GIT_CONFIG_VALUE_1": helper, "INFRA_GIT_TOKEN": token}
