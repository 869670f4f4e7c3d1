"""Typed error families.

Every error a user can cause carries a location (file, line, column, field path), what is wrong, and how to fix it,
so the CLI prints one line and never a traceback. Expected outcomes (an infeasible intent, a failed verification)
are errors with their own exit codes, not bugs.

Exit codes (stable, documented in the README):
  0 ok, 1 bad input, 2 infeasible, 3 verification failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_INFEASIBLE = 2
EXIT_VERIFICATION_FAILED = 3


@dataclass(frozen=True)
class Location:
    """Where in a user's file something is: 1-based line and column, and the dotted field path."""

    file: str | None = None
    line: int | None = None
    column: int | None = None
    path: str = ""

    def prefix(self) -> str:
        parts = []
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            parts.append(where)
        if self.path:
            parts.append(self.path)
        return ": ".join(parts)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, formatted as `file:line:col: field.path: what — To fix: how`."""

    message: str
    location: Location = field(default_factory=Location)
    fix: str | None = None

    def __str__(self) -> str:
        head = self.location.prefix()
        text = f"{head}: {self.message}" if head else self.message
        if self.fix:
            text += f" — To fix: {self.fix}"
        return text


class InfraError(Exception):
    """Base of every error the CLI reports without a traceback."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, problems: list[Problem] | Problem | str):
        if isinstance(problems, str):
            problems = [Problem(problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class IntentError(InfraError):
    """An intent or cluster profile is malformed or contradicts itself."""


class CatalogError(InfraError):
    """A catalog entry is missing, unknown or malformed."""


class InfeasibleError(InfraError):
    """No deployment satisfies the intent."""

    exit_code = EXIT_INFEASIBLE


class ValidationError(InfraError):
    """Rendered manifests break a rule."""


class EndpointError(InfraError):
    """A remote endpoint (serving engine, LLM, git host) failed or answered nonsense."""
