"""Start `infra emulate` as a real process on a free loopback port, for tests of the load client and CLI."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def emulator(*args: str, timeout: float = 30.0) -> Iterator[str]:
    """Yield the base URL (`http://127.0.0.1:PORT/v1`) of an emulator started with `args`; stop it afterwards."""
    proc = subprocess.Popen([sys.executable, "-m", "infra", "emulate", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("serving "):
            proc.kill()
            raise RuntimeError(f"emulator did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
        yield line.split()[1]
    finally:
        stop(proc, timeout)


def stop(proc: subprocess.Popen, timeout: float) -> None:
    """Terminate a server process, killing it where it has not exited within `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
