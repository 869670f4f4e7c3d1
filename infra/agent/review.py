"""`infra review PLAN`: a conversation about a plan. Slash commands work without a model; free-form questions go
to the configured model, which may only read the plan and intent and try changes (each solved, none written).
A change is written to the intent, and the plan made again, only after `/accept` and a yes.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from infra.agent.patches import Outcome, parse_patch, patch_text
from infra.agent.planning import Planning
from infra.agent.session import Session
from infra.errors import EndpointError, InfraError, Location, Problem
from infra.files import write_file
from infra.planner.types import load_plan

HELP = """Commands:
  /why                 why this plan: binding constraints, SLO margins, cost, alternatives
  /alternatives        the best plans of another kind and what they cost
  /what-if CHANGES     solve the intent with changes, e.g. /what-if slo.ttft.p99=1.5s preferences.devices=L4
                       (FIELD=VALUE or SERVICE/FIELD=VALUE; nothing is written)
  /diff                the intent change of the last solved what-if
  /accept              write that change to the intent and plan again (asks first)
  /export FILE         write that change as a patch file (YAML)
  /exit                leave
Anything else is a question for the configured LLM."""


class Review:
    """One review session; `read(prompt)` gives the next line (None at the end)."""

    def __init__(self, plan_path: Path, console: Console, read: Callable[[str], str | None], *,
                 planning: Planning, intent_path: Path | None = None, catalog_dirs: tuple[Path, ...] = ()):

        self.plan_path = plan_path
        self.console = console
        self.read = read
        self.planning = planning
        self.catalog_dirs = catalog_dirs
        self.plan = load_plan(plan_path)
        intent = intent_path or Path(self.plan.spec.provenance.intent)
        self.session = Session(intent, self.plan, planning, [], catalog_dirs,
                               self.plan.spec.solver.objective)
        self.pending: str | None = None
        self.failures = 0
        self._llm: Any = None

    def run(self) -> int:
        """Read and answer lines until /exit or the end of input; 1 when a command failed, else 0."""
        self.console.print(f"reviewing {self.plan.metadata.name} (${self.plan.spec.cost.per_hour:g}/h); /help lists "
                           "the commands", markup=False)
        while True:
            line = self.read("> ")
            if line is None:
                break
            line = line.strip()
            if not line:
                continue
            if line in ("/exit", "/quit"):
                break
            try:
                self.handle(line)
            except InfraError as exc:
                self.failures += 1
                for problem in exc.problems:
                    self.console.print(f"error: {problem}", markup=False)
        return 1 if self.failures else 0

    def handle(self, line: str) -> None:
        command, _, rest = line.partition(" ")
        rest = rest.strip()
        handlers = {"/help": self.help, "/why": self.why, "/alternatives": self.alternatives,
                    "/what-if": self.what_if, "/diff": self.diff, "/accept": self.accept, "/export": self.export}
        if command in handlers:
            handlers[command](rest)
        elif command.startswith("/"):
            raise InfraError(f"unknown command {command} — To fix: use one of {', '.join(handlers)}, /exit")
        else:
            self.ask(line)

    def help(self, _: str) -> None:
        self.console.print(HELP, markup=False)

    def why(self, _: str) -> None:
        from infra.agent.explain import template_explanation

        self.console.print(template_explanation(self.plan), markup=False, end="")

    def alternatives(self, _: str) -> None:
        alts = self.plan.spec.alternatives
        if not alts:
            self.console.print("no feasible plan of another kind was found")
            return
        table = Table(title="alternatives of another kind", title_justify="left")
        for col in ("alternative", "$/h", "vs this plan", "uses"):
            table.add_column(col)
        for alt in alts:
            table.add_row(alt.label, f"{alt.cost_per_hour:g}", f"{alt.delta_per_hour:+g}", "; ".join(alt.uses))
        self.console.print(table)

    def _show(self, pid: str, outcome: Outcome) -> None:
        from infra.agent.show import print_outcome

        print_outcome(self.console, pid, outcome, self.session.baseline)
        if outcome.status == "solved":
            self.pending = pid
            self.console.print(f"{pid} is ready: /diff to see the change, /accept to apply it")

    def _intent(self) -> Path:
        path = self.session.intent_path
        if not path.is_file():
            raise InfraError(f"{path}: the intent this plan was made from is not there — To fix: run review "
                             "from the directory you planned in, or pass --intent PATH")
        return path

    def what_if(self, rest: str) -> None:
        self._intent()
        patch = parse_patch(rest, rationale="typed at the review prompt")
        self._show(*self.session.what_if(patch, "user"))

    def _pending(self) -> tuple[str, Outcome]:
        if self.pending is None:
            raise InfraError("no solved change yet — To fix: try one with /what-if FIELD=VALUE")
        return self.pending, self.session.outcomes[self.pending]

    def diff(self, _: str) -> None:
        pid, outcome = self._pending()
        name = str(self.session.intent_path)
        lines = difflib.unified_diff((outcome.base_text or "").splitlines(True), (outcome.text or "").splitlines(True),
                                     fromfile=name, tofile=f"{name} ({pid})")
        self.console.print("".join(lines), markup=False, highlight=False, end="")

    def accept(self, _: str) -> None:
        from infra.agent.patches import accept

        pid, outcome = self._pending()
        answer = self.read(f"Write {pid} ({patch_text(outcome.patch)}) to {self.session.intent_path} and plan again "
                           f"into {self.plan_path.parent}? [y/N] ")
        if (answer or "").strip().lower() not in ("y", "yes"):
            self.console.print("not applied")
            return
        previous = [c.model_dump(mode="json", exclude_none=True) for c in self.plan.spec.provenance.changes]
        result = accept(self._intent(), outcome, self.plan_path.parent, planning=self.planning,
                        proposed_by=self.session.origins[pid], accepted_by="user", previous=previous,
                        prompt_sha256=self._prompt_hash(pid), catalog_dirs=self.catalog_dirs,
                        objective=self.session.objective)

        old_cost = self.plan.spec.cost.per_hour
        self.plan = load_plan(self.plan_path)
        self.session = Session(self.session.intent_path, self.plan, self.planning, [], self.catalog_dirs,
                               self.session.objective)
        self.pending = None
        self._llm = None  # the next question starts from the new plan's facts
        self.console.print(f"applied {pid}; plan now ${self.plan.spec.cost.per_hour:g}/h (was ${old_cost:g}/h); "
                           f"wrote {', '.join(str(p) for p in result.written)}", markup=False)

    def _prompt_hash(self, pid: str) -> str | None:
        return self._llm.prompt_hash if self._llm is not None and self.session.origins[pid] != "user" else None

    def export(self, rest: str) -> None:
        from ruamel.yaml import YAML


        if not rest:
            raise InfraError("/export needs a file name — To fix: /export change.yaml")
        pid, outcome = self._pending()
        doc = {"apiVersion": "infra.dev/v1alpha1", "kind": "IntentPatch",
               "metadata": {"name": f"{self.plan.metadata.name}-{pid.lower()}"},
               "spec": {"intent": str(self.session.intent_path), "proposed_by": self.session.origins[pid],
                        "rationale": outcome.patch.rationale,
                        "changes": [{"path": r.path, "before": r.before, "after": r.after} for r in outcome.records],
                        "solved": {"cost_per_hour": outcome.plan.spec.cost.per_hour if outcome.plan else None,
                                   "baseline_cost_per_hour": self.plan.spec.cost.per_hour}}}
        from io import StringIO

        buf = StringIO()
        yaml = YAML(typ="safe", pure=True)
        yaml.default_flow_style = False
        yaml.dump(doc, buf)
        write_file(Path(rest), buf.getvalue())
        self.console.print(f"wrote {rest}", markup=False)

    def ask(self, question: str) -> None:
        from infra.agent.settings import CONFIGURE_HINT, load_settings

        settings = load_settings()
        if settings is None:
            raise InfraError(f"questions need an LLM endpoint, and none is configured — To fix: {CONFIGURE_HINT}; "
                             "the slash commands (/help) work without one")
        if not settings.capabilities.tools:
            raise EndpointError("questions need tool calls, which the LLM settings turn off — To fix: set "
                                "capabilities.tools: true for a server that supports them")
        if self._llm is None:
            self._llm = _Conversation(settings, self)
        before = set(self.session.outcomes)
        answer = self._llm.ask(question)
        for pid in [p for p in self.session.outcomes if p not in before]:
            self._show(pid, self.session.outcomes[pid])
        self.console.print(answer, markup=False)


class _Conversation:
    """The model's side of a review: the running message history and its read-only tools."""

    def __init__(self, settings: Any, review: Review):
        from infra.agent.client import LLMClient
        from infra.agent.facts import plan_facts
        from infra.agent.prompts import prompt_sha256, render

        self.client = LLMClient(settings)
        self.review = review
        self.system = render("review_system.j2", facts=plan_facts(review.plan))
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": self.system}]
        self.prompt_hash = prompt_sha256(self.system)

    def ask(self, question: str) -> str:
        from infra.agent.facts import Fact, plan_facts, unsupported_numbers
        from infra.agent.loop import run_loop
        from infra.agent.prompts import render

        self.messages.append({"role": "user", "content": render("review_user.j2", question=question)})
        session = self.review.session
        result = run_loop(self.client, self.messages, session.tools(f"llm: {self.client.label}", recommend=False))
        if result.answer is None:
            return f"(no answer: {result.stopped})"
        facts = plan_facts(self.review.plan)
        for outcome in session.outcomes.values():
            if outcome.plan is not None:
                facts += plan_facts(outcome.plan)
            facts += [Fact("problem", p) for p in outcome.problems]
        bad = unsupported_numbers(result.answer, facts)
        if bad:
            return (f"(the model's answer cited {', '.join(sorted(set(bad))[:5])}, which neither the plan nor the "
                    "changes tried hold, so it is not shown; /why gives the plan's own account)")
        return result.answer


def script_reader(path: Path, console: Console) -> Callable[[str], str | None]:
    """Inputs from a file, one per line, echoed after the prompt as if typed."""

    try:
        lines = iter(path.read_text(encoding="utf-8").splitlines())
    except (OSError, UnicodeDecodeError) as exc:
        raise InfraError(Problem(f"cannot read the review script: {getattr(exc, 'strerror', None) or exc}",
                                 Location(str(path)), "give a UTF-8 text file, one input per line")) from None

    def read(prompt: str) -> str | None:
        line = next(lines, None)
        if line is not None:
            console.print(f"{prompt}{line}", markup=False, highlight=False)
        return line

    return read


def console_reader(console: Console) -> Callable[[str], str | None]:
    """Inputs typed at the terminal (or piped in); None at the end of input."""

    def read(prompt: str) -> str | None:
        try:
            return console.input(prompt)
        except EOFError:
            return None

    return read
