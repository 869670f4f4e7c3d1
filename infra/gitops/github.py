"""Opening or updating the pull request through the GitHub REST API (PyGithub), at any API base URL (github.com,
GitHub Enterprise `https://HOST/api/v3`, or a local server in tests).

Calls used: GET /repos/{owner}/{repo}; GET /repos/{owner}/{repo}/pulls?state=open&head=OWNER:BRANCH&base=BASE;
POST /repos/{owner}/{repo}/pulls; PATCH /repos/{owner}/{repo}/pulls/{number}.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infra.errors import EndpointError, InfraError, Location, Problem
from infra.gitops.git import redact

DEFAULT_API = "https://api.github.com"
_FULL_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_GITHUB_REMOTE = re.compile(r"github\.com[:/]([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$")
_FIX = {401: "check that GITHUB_TOKEN (or GH_TOKEN) holds a valid token",
        403: "give the token permission to write pull requests (contents and pull requests: write)",
        404: "check --github OWNER/REPO and that the token can see the repository",
        422: "check that the branch was pushed and that --base names a branch of the repository"}


@dataclass(frozen=True)
class PullRequest:
    number: int
    url: str
    action: str
    """`created` or `updated`."""


def repo_from_remote(url: str | None) -> str | None:
    """OWNER/REPO of a github.com remote URL (https or ssh), else None."""
    m = _GITHUB_REMOTE.search(url or "")
    return f"{m.group(1)}/{m.group(2)}" if m else None


def check_full_name(name: str) -> str:
    if not _FULL_NAME.match(name):
        raise InfraError(Problem(f"--github {name!r} is not OWNER/REPO", Location("--github"),
                                 "write it as owner/repository, e.g. acme/deployments"))
    return name


def open_or_update(*, api_url: str, token: str, full_name: str, head: str, base: str, title: str,
                   body: str) -> PullRequest:
    """The open pull request from `head` into `base`, with this title and body: edited when one is open, created
    otherwise. Errors are one line, with the token redacted."""
    from github import Auth, Github, GithubException

    client = Github(auth=Auth.Token(token), base_url=api_url.rstrip("/"), timeout=30, retry=2)
    try:
        repo = client.get_repo(full_name)
        owner = full_name.split("/")[0]
        existing = [p for p in repo.get_pulls(state="open", head=f"{owner}:{head}", base=base)]
        if existing:
            pr = min(existing, key=lambda p: p.number)
            pr.edit(title=title, body=body)
            return PullRequest(pr.number, pr.html_url, "updated")
        pr = repo.create_pull(base=base, head=head, title=title, body=body)
        return PullRequest(pr.number, pr.html_url, "created")
    except GithubException as exc:
        message = exc.message or (exc.data.get("message") if isinstance(exc.data, dict) else None) or "no message"
        detail = redact(f"{exc.status} {message}", (token,))
        raise EndpointError(Problem(f"GitHub API {api_url} ({full_name}): {detail}", Location(api_url),
                                    _FIX.get(exc.status, "check the API URL and the repository"))) from None
    except OSError as exc:
        raise EndpointError(Problem(f"GitHub API {api_url} unreachable: {redact(str(exc), (token,))}",
                                    Location(api_url), "check --github-api and the network")) from None
    finally:
        client.close()
