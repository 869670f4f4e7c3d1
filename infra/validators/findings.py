"""What validation reports: findings (rule, severity, where, what, how to fix) gathered into a Report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True, order=True)
class Finding:
    """One broken rule at one place: `file:line` of the offending field, the object it belongs to."""

    file: str
    line: int
    rule: str
    object: str
    message: str
    severity: Severity = "error"
    fix: str = ""
    field: str = ""
    """Dotted path of the offending field inside the document, e.g. `spec.template.spec.containers[0].image`."""

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "file": self.file, "line": self.line,
                "object": self.object, "field": self.field, "message": self.message, "fix": self.fix}

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        text = f"{where}: {self.rule} {self.severity}: {self.object}: {self.message}"
        return text + (f" — To fix: {self.fix}" if self.fix else "")


@dataclass
class Report:
    """Every finding of one validation run, with what was looked at and how long it took."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    files: int = 0
    objects: int = 0
    checks: list[str] = field(default_factory=list)
    """Which layers ran (schema, semantic, security, kustomize, profile, plan, live)."""
    notes: list[str] = field(default_factory=list)
    """What was not checked and why (e.g. a framework without argument spelling)."""
    seconds: float = 0.0

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def sort(self) -> None:
        """Findings in file order, then line, then rule: the same inputs give the same report."""
        self.findings = sorted(set(self.findings))

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "ok": self.ok, "files": self.files, "objects": self.objects,
            "errors": len(self.errors), "warnings": len(self.warnings), "checks": self.checks,
            "notes": self.notes, "findings": [f.as_dict() for f in self.findings],
        }
