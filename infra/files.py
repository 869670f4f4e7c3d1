"""Writing files without ever leaving a half-written one behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from infra.errors import InfraError, Location, Problem


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, text: str | bytes) -> None:
    """Write `text` (or bytes) to `path` through a temporary file in the same directory, then rename over the
    target."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            # mkstemp makes the file private (0600); the file written keeps the mode of the one it replaces, or
            # takes the one any new file gets under the umask, so that a repository's files stay readable.
            os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())
            if isinstance(text, bytes):
                with os.fdopen(fd, "wb") as fb:
                    fb.write(text)
            else:
                with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                    fh.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise InfraError(Problem(f"cannot write: {exc.strerror}", Location(str(path)),
                                 "check that the directory exists and is writable")) from None


def read_jsonl(path: str | Path, what: str, missing_fix: str = "check the path") -> list[tuple[int, dict]]:
    """(line number, object) for every non-empty line of a JSON Lines file; a located error otherwise."""
    import json

    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InfraError(Problem(f"{what} not found", Location(str(path), 1, 1), missing_fix)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InfraError(Problem(f"cannot read {what}: {exc}", Location(str(path), 1, 1),
                                 "save it as UTF-8 text, one JSON object per line")) from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InfraError(Problem(f"invalid JSON: {exc.msg}", Location(str(path), n, exc.colno),
                                     "write one JSON object per line")) from None
        if not isinstance(obj, dict):
            raise InfraError(Problem("each line must be a JSON object", Location(str(path), n, 1),
                                     "write one JSON object per line")) from None
        out.append((n, obj))
    return out
