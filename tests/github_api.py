"""A local GitHub REST API server speaking what `infra pr` uses: get a repository, list pull requests filtered by
head and base, create one, edit one. Tests start it on a free port; it checks the token and records requests."""

from __future__ import annotations

import json
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit


@dataclass
class FakeGitHub:
    """State of the server: one repository, its pull requests, and every request seen."""

    token: str
    full_name: str
    remote: str = ""
    """The bare repository standing for GitHub's copy: pull requests may only name its branches."""
    pulls: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""
    api_path: str = ""
    """Where the API lives on the server: empty like api.github.com, `/api/v3` like GitHub Enterprise Server."""

    def branches(self) -> set[str]:
        out = subprocess.run(["git", "--git-dir", self.remote, "for-each-ref", "--format=%(refname:short)",
                              "refs/heads"], capture_output=True, text=True, check=True).stdout
        return set(out.split())


def _handler(state: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

        def _send(self, code: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self, method: str) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}") if length else {}
            state.requests.append({"method": method, "path": parts.path, "query": parse_qs(parts.query),
                                   "body": body, "authorization": self.headers.get("Authorization")})
            if self.headers.get("Authorization") not in (f"token {state.token}", f"Bearer {state.token}"):
                return self._send(401, {"message": "Bad credentials"})
            prefix = f"{state.api_path}/repos/{state.full_name}"
            repo_url = f"{state.base_url}{prefix}"
            if parts.path == prefix and method == "GET":
                owner, name = state.full_name.split("/")
                return self._send(200, {"id": 1, "name": name, "full_name": state.full_name, "url": repo_url,
                                        "owner": {"login": owner}, "default_branch": "main"})
            if parts.path == f"{prefix}/pulls" and method == "GET":
                q = {k: v[0] for k, v in parse_qs(parts.query).items()}
                found = [p for p in state.pulls
                         if q.get("state", "open") in (p["state"], "all")
                         and ("head" not in q or q["head"] == p["head"]["label"])
                         and ("base" not in q or q["base"] == p["base"]["ref"])]
                return self._send(200, found)
            if parts.path == f"{prefix}/pulls" and method == "POST":
                head, base = body.get("head"), body.get("base")
                branches = state.branches()
                if base not in branches or head not in branches:
                    return self._send(422, {"message": "Validation Failed",
                                            "errors": [{"field": "head" if base in branches else "base",
                                                        "code": "invalid"}]})
                number = len(state.pulls) + 1
                owner = state.full_name.split("/")[0]
                pr = {"number": number, "state": "open", "title": body["title"], "body": body.get("body"),
                      "url": f"{repo_url}/pulls/{number}",
                      "html_url": f"https://github.example/{state.full_name}/pull/{number}",
                      "head": {"ref": head, "label": f"{owner}:{head}"}, "base": {"ref": base, "label": base}}
                state.pulls.append(pr)
                return self._send(201, pr)
            if parts.path.startswith(f"{prefix}/pulls/") and method == "PATCH":
                number = int(parts.path.rsplit("/", 1)[1])
                pr = next((p for p in state.pulls if p["number"] == number), None)
                if pr is None:
                    return self._send(404, {"message": "Not Found"})
                pr.update({k: v for k, v in body.items() if k in ("title", "body", "state")})
                return self._send(200, pr)
            return self._send(404, {"message": "Not Found"})

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

    return Handler


class GitHubServer:
    """Context manager: `with GitHubServer(token, "acme/deploy", bare_repo) as gh: gh.url, gh.state`."""

    def __init__(self, token: str, full_name: str, remote: str, api_path: str = ""):
        self.state = FakeGitHub(token, full_name, remote, api_path=api_path)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{api_path}"
        self.state.base_url = self.url.removesuffix(api_path) if api_path else self.url
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
