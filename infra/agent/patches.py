"""Typed intent patches: what a model (or a user at the review prompt) may propose, applied, checked and solved.

A patch changes named fields of the intent as the user would edit them (`slo.ttft.p99 = 1.5s`, allow a device or
a precision, disaggregation, budgets, replicas). It is applied to the intent's YAML (comments kept), checked like
`infra check`, and solved by the planner for real on a temporary copy; nothing is written to the user's files
until `accept` is called after the user's confirmation.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from infra.agent.planning import Planned, Planning
from infra.errors import InfeasibleError, InfraError, IntentError, Location, Problem
from infra.files import write_file
from infra.planner.types import DeploymentPlan

FIELDS = (
    r"slo\.(ttft|tpot|itl|e2e)\.p\d{1,2}(\.\d+)?", r"budget\.(per_hour|per_million_tokens|per_request)",
    r"availability\.(min_replicas|zones|headroom)",
    r"preferences\.(devices|frameworks|disaggregation|fractional_sharing|multi_node|spot)", r"precisions",
    r"max_context",
)
FIELD_HELP = ("slo.<ttft|tpot|itl|e2e>.pNN, budget.<per_hour|per_million_tokens|per_request>, "
              "availability.<min_replicas|zones|headroom>, "
              "preferences.<devices|frameworks|disaggregation|fractional_sharing|multi_node|spot>, precisions, "
              "max_context")
FIELD_PATTERN = "^(" + "|".join(FIELDS) + ")$"
LIST_FIELDS = ("preferences.devices", "preferences.frameworks", "precisions")


class _Proposal(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class IntentChange(_Proposal):
    """One edit of one field of the intent."""

    service: str | None
    """Service name; null for the only service, or, for a budget, the whole intent's budget."""
    field: str = Field(pattern=FIELD_PATTERN)
    """Field under the service (one of: slo.<ttft|tpot|itl|e2e>.pNN, budget.<per_hour|per_million_tokens|
    per_request>, availability.<min_replicas|zones|headroom>, preferences.<devices|frameworks|disaggregation|
    fractional_sharing|multi_node|spot>, precisions, max_context). List fields (devices, frameworks,
    precisions) get the value added to what is allowed."""
    value: str = Field(min_length=1, max_length=64)
    """The new value as written in an intent file: 1.5s, 80ms, $40/h, 20%, 3, fp8, H100-SXM, on, true, 32k."""


class IntentPatch(_Proposal):
    """A proposed change to the intent; the planner solves it before anyone sees it."""

    changes: list[IntentChange] = Field(min_length=1, max_length=6)
    rationale: str = Field(max_length=600)
    """Why this change, in one or two sentences."""


def parse_patch(text: str, rationale: str = "") -> IntentPatch:
    """`[service/]field=value ...` (as typed at the review prompt) -> IntentPatch; bad syntax is an IntentError."""
    changes = []
    for item in text.split():
        key, sep, value = item.partition("=")
        service, _, fld = key.rpartition("/")
        if not sep or not value or not re.match(FIELD_PATTERN, fld):
            raise IntentError(Problem(f"cannot read the change {item!r}", Location("what-if"),
                                      "write FIELD=VALUE (or SERVICE/FIELD=VALUE), e.g. slo.ttft.p99=1.5s, "
                                      "preferences.devices=L4, budget.per_hour=$2/h; fields: " + FIELD_HELP))
        changes.append(IntentChange(service=service or None, field=fld, value=value))
    if not changes:
        raise IntentError(Problem("no change given", Location("what-if"), "write e.g. /what-if slo.ttft.p99=1.5s"))
    return IntentPatch(changes=changes, rationale=rationale)


def patch_text(patch: IntentPatch) -> str:
    return " ".join(f"{c.service + '/' if c.service else ''}{c.field}={c.value}" for c in patch.changes)


@dataclass(frozen=True)
class ChangeRecord:
    path: str
    before: Any
    after: Any


@dataclass
class Outcome:
    """A patch after checking and solving: `solved` (with the plan), `infeasible` or `rejected` (with why)."""

    patch: IntentPatch
    status: str
    records: list[ChangeRecord] = field(default_factory=list)
    text: str | None = None
    """The patched intent file."""
    base_text: str | None = None
    plan: DeploymentPlan | None = None
    problems: list[str] = field(default_factory=list)


def _yaml():
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml


def _scalar(text: str) -> Any:
    """The value typed as YAML would type it in the file (3 -> int, true -> bool, 1.5s -> str)."""
    from ruamel.yaml import YAML

    try:
        value = YAML(typ="safe", pure=True).load(text)
    except Exception:  # noqa: BLE001 - anything YAML cannot read stays the string it was
        return text
    return value if isinstance(value, (str, int, float, bool)) else text


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def apply_patch(text: str, patch: IntentPatch) -> tuple[str, list[ChangeRecord]]:
    """The intent text with the patch applied (comments and layout kept), and what changed; a patch that names
    an unknown service or adds what is already allowed is an IntentError saying so."""
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.util import load_yaml_guess_indent

    yaml = _yaml()
    _, indent, block_seq_indent = load_yaml_guess_indent(text)
    yaml.indent(mapping=block_seq_indent or 2, sequence=indent or 2, offset=block_seq_indent or 0)
    doc = yaml.load(text)
    spec = doc["spec"]
    services = spec["services"]
    names = [s.get("name") for s in services]
    records = []
    for ch in patch.changes:
        if ch.service is None and ch.field.startswith("budget."):
            parent, root = spec, "spec"
        elif ch.service is None:
            if len(services) != 1:
                raise IntentError(Problem(f"{ch.field}: the intent has {len(services)} services",
                                          Location("patch"), f"name one of {', '.join(names)}"))
            parent, root = services[0], "spec.services[0]"
        elif ch.service in names:
            i = names.index(ch.service)
            parent, root = services[i], f"spec.services[{i}]"
        else:
            raise IntentError(Problem(f"there is no service {ch.service!r}", Location("patch"),
                                      f"use one of {', '.join(names)}"))
        *heads, last = ch.field.split(".")
        node = parent
        for key in heads:
            if key not in node or not isinstance(node[key], dict):
                node[key] = CommentedMap()
            node = node[key]
        before = _plain(node.get(last))
        if ch.field in LIST_FIELDS:
            current = list(node.get(last) or [])
            if not current:
                raise IntentError(Problem(f"{ch.field} is empty, so every value is already allowed",
                                          Location("patch"), f"propose another change than adding {ch.value}"))
            if ch.value in current:
                raise IntentError(Problem(f"{ch.value} is already in {ch.field}", Location("patch"),
                                          "propose another change"))
            node[last].append(ch.value)
        else:
            node[last] = _scalar(ch.value)
        records.append(ChangeRecord(f"{root}.{ch.field}", before, _plain(node[last])))
    buf = StringIO()
    yaml.dump(doc, buf)
    return buf.getvalue(), records


class _Sibling:
    """A hidden temporary file next to `path`, so that relative paths in it (profile, traces) resolve the same."""

    def __init__(self, path: Path, text: str):
        self.path, self.text, self.tmp = path, text, None

    def __enter__(self) -> Path:
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.stem}.", suffix=".yaml", dir=self.path.parent)
            self.tmp = Path(tmp)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(self.text)
        except OSError as exc:
            self.__exit__()
            raise InfraError(Problem(f"cannot write a temporary copy next to it: {exc.strerror}",
                                     Location(str(self.path)), "make its directory writable")) from None
        return self.tmp

    def __exit__(self, *exc: object) -> None:
        if self.tmp is not None:
            self.tmp.unlink(missing_ok=True)


def _problems(exc: InfraError, label: str) -> list[str]:
    return [str(Problem(p.message, Location(label, p.location.line, p.location.column, p.location.path), p.fix))
            for p in exc.problems]


def check_text(text: str, beside: Path, planning: Planning, catalog_dirs: tuple[Path, ...] = (),
               label: str = "the draft") -> list[str]:
    """What `infra check` says about intent `text` as if it were a file next to `beside` (empty when valid)."""
    beside.parent.mkdir(parents=True, exist_ok=True)
    with _Sibling(beside, text) as tmp:
        try:
            planning.check(tmp, catalog_dirs)
        except InfraError as exc:
            return _problems(exc, label)
    return []


def solve_patch(intent_path: Path, patch: IntentPatch, planning: Planning, catalog_dirs: tuple[Path, ...] = (),
                objective: str = "cost") -> Outcome:
    """Apply, check and solve a patch of the intent at `intent_path`; the user's files are not touched."""
    base = intent_path.read_text(encoding="utf-8")
    try:
        text, records = apply_patch(base, patch)
    except IntentError as exc:
        return Outcome(patch, "rejected", problems=[str(p) for p in exc.problems])
    problems = check_text(text, intent_path, planning, catalog_dirs, label="the patched intent")
    if problems:
        return Outcome(patch, "rejected", records, text, base, problems=problems)
    with _Sibling(intent_path, text) as tmp:
        try:
            result = planning.plan(tmp, None, catalog_dirs=catalog_dirs, objective=objective)
        except InfeasibleError as exc:
            return Outcome(patch, "infeasible", records, text, base, problems=_problems(exc, "the patched intent"))
        except InfraError as exc:
            return Outcome(patch, "rejected", records, text, base, problems=_problems(exc, "the patched intent"))
    return Outcome(patch, "solved", records, text, base, plan=result.plan)


def accept(intent_path: Path, outcome: Outcome, plan_dir: Path | None, *, planning: Planning, proposed_by: str,
           accepted_by: str, previous: list[dict[str, Any]] | None = None, prompt_sha256: str | None = None,
           catalog_dirs: tuple[Path, ...] = (), objective: str = "cost") -> Planned:
    """Write the patched intent over `intent_path` and plan it (into `plan_dir` when given) with the change recorded
    in the plan's provenance (after `previous` changes). Call only after the user confirmed. Refuses when the intent
    file changed since the patch was solved, so that no edit of the user's is overwritten."""

    if outcome.status != "solved" or outcome.text is None:
        raise IntentError(Problem(f"the patch is {outcome.status}, not solved", Location(str(intent_path)),
                                  "accept a patch that solved"))
    if intent_path.read_text(encoding="utf-8") != outcome.base_text:
        raise IntentError(Problem("the intent file changed since the patch was solved", Location(str(intent_path)),
                                  "run the what-if again on the current file"))
    changes = list(previous or []) + [
        {"path": r.path, "before": r.before, "after": r.after, "proposed_by": proposed_by,
         "accepted_by": accepted_by, "rationale": outcome.patch.rationale or None, "prompt_sha256": prompt_sha256}
        for r in outcome.records]
    changes = [{k: v for k, v in c.items() if v is not None or k == "after"} for c in changes]
    # The user confirmed and the file still holds what the patch was solved on: replacing it is theirs to ask.
    write_file(intent_path.resolve(), outcome.text, force=True)
    return planning.plan(intent_path, plan_dir, catalog_dirs=catalog_dirs, objective=objective, changes=changes)
