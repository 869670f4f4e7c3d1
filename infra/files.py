"""Reading and writing the user's files: never a half-written file, never a write outside the directory the user
named, never a file replaced or deleted that infra did not write (unless the user says `--force`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from infra.errors import InfraError, Location, Problem


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


RECORD = ".infra-written.json"
"""In a directory infra writes a tree into (plan -o, render -o, verify --write): the files it wrote there and their
SHA-256. A file is infra's to replace or delete only while it still holds what infra wrote; everything else in the
directory is the user's."""
LEGACY_MARKER = ".infra-manifests"
"""What earlier versions left at the root of a rendered tree: every file there was written by infra."""


@dataclass(frozen=True)
class Conflict:
    """A path the write would replace or delete although infra did not write what is there now."""

    rel: str
    why: str
    fix: str | None = None


def check_relative(rel: str, root: str | Path, source: Location | None = None) -> str:
    """`rel` as a plain relative POSIX path that stays under `root`, or a one-line error naming where the name came
    from (a plan field, a flag): names from files must never place a write outside the directory the user named."""
    parts = rel.split("/")
    if (not rel or rel.startswith("/") or "\\" in rel or "\0" in rel or ":" in parts[0]
            or any(part in ("", ".", "..") for part in parts)):
        raise InfraError(Problem(f"{rel!r} would be written outside {root}",
                                 source or Location(str(root)),
                                 "names that become paths must be plain names: lowercase letters, digits and '-'"))
    return rel


def _sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _records(root: Path, rels: Iterable[str]) -> dict[str, set[str]]:
    """relative path under `root` -> SHA-256 values infra recorded writing there, from the records in `root`, in
    the directories above it and in every directory on the way to `rels` (a tree rendered into `DIR/manifests`
    after `plan -o DIR` is infra's either way)."""
    base = Path(os.path.abspath(root))
    dirs = {base, *base.parents}
    for rel in rels:
        d = base
        for part in rel.split("/")[:-1]:
            d = d / part
            dirs.add(d)
    owned: dict[str, set[str]] = {}
    for d in sorted(dirs):
        record = d / RECORD
        if not record.is_file() or record.is_symlink():
            continue
        try:
            files = json.loads(record.read_text(encoding="utf-8")).get("files", {})
        except (OSError, ValueError, AttributeError):
            continue
        for rel, sha in files.items() if isinstance(files, dict) else ():
            if not isinstance(rel, str) or not isinstance(sha, str):
                continue
            where = Path(os.path.normpath(d / rel))
            if base in where.parents:
                owned.setdefault(where.relative_to(base).as_posix(), set()).add(sha)
    return owned


def _legacy(root: Path) -> bool:
    return (root / LEGACY_MARKER).is_file() and not (root / RECORD).exists()


def _escape(root: Path, rel: str) -> str | None:
    """Why writing `rel` would leave `root` through a symbolic link on the way, else None."""
    real = root.resolve()
    d = root
    for part in rel.split("/")[:-1]:
        d = d / part
        if d.is_symlink():
            target = d.resolve()
            if target != real and real not in target.parents:
                return f"{d} is a symbolic link to {target}, outside {root}"
        elif d.exists() and not d.is_dir():
            return f"{d} is a file where a directory is needed"
    return None


def plan_writes(root: str | Path, files: Mapping[str, str | bytes | None], *, force: bool = False,
                prune: tuple[str, ...] = (), keep_foreign: bool = False) -> list[str]:
    """Check a write of `files` (relative path -> content, None while not known yet) under `root` before any work
    is spent on it (an identical file is never a conflict); returns
    the files infra wrote earlier under the `prune` prefixes that the write would delete (no longer produced).
    Refused, all problems at once: a path leaving `root`; a path through a link out of it; replacing or deleting a
    file infra did not write (or that was changed since), a link, a directory; writing into a non-empty directory
    infra never wrote into (unless `keep_foreign`, for a command whose output is meant to sit beside the user's
    files). `force` lifts the last three, never the first two."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise InfraError(Problem("output exists and is not a directory", Location(str(root)),
                                 "give a directory path"))
    for rel in files:
        check_relative(rel, root)
    problems = [Problem(why, Location(str(root / rel)), "remove the link, or choose another output directory")
                for rel in files if (why := _escape(root, rel))]
    if problems:
        raise InfraError(problems)
    owned = _records(root, files)
    legacy = _legacy(root)
    stale = sorted(rel for rel in owned if rel not in files and any(rel.startswith(p) for p in prune)
                   and (root / rel).is_file() and not (root / rel).is_symlink())
    conflicts: list[Conflict] = []
    for rel, content in files.items():
        target = root / rel
        if target.is_symlink():
            conflicts.append(Conflict(rel, "is a symbolic link infra did not write"))
        elif target.is_dir():
            conflicts.append(Conflict(rel, "is a directory"))
        elif target.exists():
            sha = _sha(target)
            same = content is not None and sha == hashlib.sha256(
                content.encode("utf-8") if isinstance(content, str) else content).hexdigest()
            if not same and sha not in owned.get(rel, ()) and not legacy:
                conflicts.append(Conflict(rel, "already exists, and infra did not write it (or it was changed "
                                               "since)"))
    for rel in stale:
        if _sha(root / rel) not in owned[rel]:
            conflicts.append(Conflict(rel, "was written by infra and changed since; the new output no longer has it"))
    stale = [rel for rel in stale if _sha(root / rel) in owned[rel]]
    if legacy:
        stale.append(LEGACY_MARKER)  # the record replaces it
    if root.is_dir() and not keep_foreign and not owned and not legacy and any(root.iterdir()):
        conflicts.insert(0, Conflict("", "is not empty and infra never wrote into it",
                                     "choose an empty or new directory, or pass --force to write beside the files "
                                     "there"))
    if conflicts and not force:
        fix = ("choose another file, or pass --force to replace it" if keep_foreign else
               "move it away, choose another output directory, or pass --force to replace it")
        raise InfraError([Problem(c.why, Location(str(root / c.rel) if c.rel else str(root)), c.fix or fix)
                          for c in conflicts])
    return stale


def write_files(root: str | Path, files: Mapping[str, str | bytes], *, force: bool = False,
                prune: tuple[str, ...] = (), keep_foreign: bool = False, record: bool = True) -> list[Path]:
    """Write `files` under `root` all or nothing, after `plan_writes`' checks: the new files are written to a
    staging directory on the same file system first, then moved into place; if a move fails, every file moved is
    put back as it was. Files infra wrote earlier under `prune` that the new output lacks are deleted; nothing else
    in `root` is touched. With `record`, `root/.infra-written.json` lists what was written (and stays listing what
    infra wrote earlier outside `prune` and still holds its content)."""
    root = Path(root)
    stale = plan_writes(root, files, force=force, prune=prune, keep_foreign=keep_foreign)
    out: dict[str, bytes] = {rel: c.encode("utf-8") if isinstance(c, str) else c for rel, c in files.items()}
    if record:
        out[RECORD] = _record_text(root, out, prune, stale)
    try:
        fresh = not root.exists()
        parent = root.parent if fresh else root
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.infra-", dir=parent))
    except OSError as exc:
        raise InfraError(Problem(f"cannot write: {exc.strerror}", Location(str(root)),
                                 "check that the directory is writable")) from None
    try:
        mode = 0o666 & ~_umask()
        for rel, data in out.items():
            target = staging / "new" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            # A file replaced keeps its mode, so that a repository's files stay as readable as they were.
            before = root / rel
            os.chmod(target, before.stat().st_mode & 0o7777 if before.is_file() and not before.is_symlink()
                     else mode)
        if fresh:
            os.replace(staging / "new", root)
        else:
            _swap_in(root, staging, list(out), stale)
    except OSError as exc:
        raise InfraError(Problem(f"cannot write: {exc.strerror}", Location(str(root)),
                                 "check that the directory is writable; nothing was changed")) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [root / rel for rel in files]


def write_file(path: str | Path, text: str | bytes | None, *, force: bool = False) -> Path:
    """Write one file the user named (`-o FILE`, `--save FILE`) whole or not at all; an existing file with other
    content is the user's and is replaced only with `force`. With `text` None, only checks that it could be
    written (before the work that makes it)."""
    path = Path(path)
    check_relative(path.name, path.parent)
    if text is None:
        plan_writes(path.parent, {path.name: None}, force=force, keep_foreign=True)
        return path
    return write_files(path.parent, {path.name: text}, force=force, keep_foreign=True, record=False)[0]


def _record_text(root: Path, out: Mapping[str, bytes], prune: tuple[str, ...], stale: list[str]) -> bytes:
    earlier = _records(root, ())
    files = {rel: hashlib.sha256(data).hexdigest() for rel, data in out.items()}
    for rel, shas in earlier.items():
        if rel not in files and rel not in stale and not any(rel.startswith(p) for p in prune):
            sha = _sha(root / rel)
            if sha in shas:
                files[rel] = sha
    return (json.dumps({"written_by": "infra", "files": dict(sorted(files.items()))}, indent=1, sort_keys=True)
            + "\n").encode("utf-8")


def _swap_in(root: Path, staging: Path, rels: list[str], stale: list[str]) -> None:
    """Move the staged files over their targets, and the stale ones out; on a failure, undo every step."""
    done: list[tuple[Path, Path | None]] = []  # (target, where its previous content went)
    made: list[Path] = []
    try:
        for i, rel in enumerate([*rels, *stale]):
            target = root / rel
            backup = None
            if target.exists() or target.is_symlink():
                backup = staging / "old" / str(i)
                backup.parent.mkdir(parents=True, exist_ok=True)
                os.replace(target, backup)
            if i < len(rels):
                for d in reversed(target.parents):
                    if d != root and root in d.parents and not d.exists():
                        d.mkdir()
                        made.append(d)
                try:
                    os.replace(staging / "new" / rel, target)
                except OSError:
                    if backup is not None:
                        os.replace(backup, target)
                    raise
            done.append((target, backup))
    except OSError:
        for target, backup in reversed(done):
            if backup is not None:
                os.replace(backup, target)
            elif target.exists():
                target.unlink()
        for d in reversed(made):
            with contextlib.suppress(OSError):
                d.rmdir()
        raise
    for rel in stale:  # directories the deleted files leave empty go with them
        d = (root / rel).parent
        while d != root and root in d.parents:
            try:
                d.rmdir()
            except OSError:
                break
            d = d.parent


