"""Writing files without ever leaving a half-written one behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from infra.errors import InfraError, Location, Problem


def write_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same directory, then rename over the target."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise InfraError(Problem(f"cannot write: {exc.strerror}", Location(str(path)),
                                 "check that the directory exists and is writable")) from None
