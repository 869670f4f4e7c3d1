"""What `infra pr` prints: the commit, the push, the pull request, or the next steps."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape


def pr_json(result: Any) -> dict[str, Any]:
    """The outcome of `infra.api.open_pr` as JSON-ready data."""
    return {
        "branch": result.branch, "base": result.base, "commit": result.commit, "committed": result.committed,
        "title": result.title, "body": result.body,
        "files": {p: {"status": s, "added": a, "removed": r} for p, (s, a, r) in result.files.items()},
        "body_file": str(result.body_file) if result.body_file else None, "pushed": result.pushed,
        "pull_request": ({"number": result.pr_number, "url": result.pr_url, "action": result.pr_action}
                         if result.pr_number is not None else None),
        "next_steps": result.next_steps,
    }


def print_pr(console: Console, result: Any) -> None:
    files = result.files
    counts = {k: sum(1 for s, _, _ in files.values() if s == k) for k in "AMD"}
    summary = f"{counts['A']} added, {counts['M']} changed, {counts['D']} removed against {result.base}"
    if result.commit is None:
        console.print(f"no change: {escape(result.base)} already holds this plan")
    elif result.committed:
        console.print(f"committed {result.commit[:12]} on {escape(result.branch)} ({summary})")
    else:
        console.print(f"no new commit: {escape(result.branch)} already holds this plan ({summary})")
    console.print(escape(result.title))
    if result.pushed:
        console.print(f"pushed {escape(result.branch)}")
    if result.pr_number is not None:
        console.print(f"pull request #{result.pr_number} {result.pr_action}: {escape(result.pr_url or '')}")
    if result.body_file is not None:
        console.print(f"wrote {escape(str(result.body_file))}")
    for step in result.next_steps:
        console.print(f"next: {escape(step)}")
