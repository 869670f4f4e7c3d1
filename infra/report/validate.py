"""Printing validation reports and the rule table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from infra.validators.findings import Report
from infra.validators.rules import RULES


def print_report(console: Console, report: Report) -> None:
    if report.findings:
        table = Table(show_lines=False, header_style="bold")
        for col in ("rule", "severity", "where", "object", "message", "fix"):
            table.add_column(col, overflow="fold")
        for f in report.findings:
            style = "red" if f.severity == "error" else "yellow"
            table.add_row(f.rule, f"[{style}]{f.severity}[/{style}]", f"{f.file}:{f.line}", f.object, f.message,
                          f.fix)
        console.print(table)
    for note in report.notes:
        console.print(f"note: {note}")
    verdict = "[green]valid[/green]" if report.ok else "[red]invalid[/red]"
    console.print(f"{verdict}: {report.objects} objects in {report.files} files, {len(report.errors)} errors, "
                  f"{len(report.warnings)} warnings ({', '.join(report.checks)}; {report.seconds:.2f} s)")


def report_json(report: Report) -> dict[str, Any]:
    return report.as_dict()


def print_rules(console: Console) -> None:
    table = Table(header_style="bold")
    for col in ("rule", "severity", "layer", "checks", "fix"):
        table.add_column(col, overflow="fold")
    for r in RULES.values():
        table.add_row(r.id, r.severity, r.layer, r.title, r.fix)
    console.print(table)


def rules_json() -> list[dict[str, str]]:
    return [{"rule": r.id, "severity": r.severity, "layer": r.layer, "checks": r.title, "fix": r.fix}
            for r in RULES.values()]
