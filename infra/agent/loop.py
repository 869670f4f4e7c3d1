"""The bounded tool loop: the model calls typed tools, every call is validated, the loop always ends.

Tools are declared once (name, pydantic arguments model, handler) and their JSON Schemas are generated from the
models. Arguments are untrusted: malformed JSON, unknown tools, values outside the models and repeated calls are
answered with the reason instead of being run, and the model may try again within the budgets (model turns,
solver calls). The last turn offers no tools, which asks for the final answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from infra.agent.client import LLMClient, Message
from infra.errors import InfraError


class NoArgs(BaseModel):
    """No arguments."""

    model_config = ConfigDict(extra="forbid")


class ToolResult(BaseModel):
    """What a tool call gives back to the model."""

    status: Literal["ok", "error", "infeasible", "rejected"]
    message: str = ""
    data: Any = None


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args: type[BaseModel]
    handler: Callable[[Any], ToolResult]
    solves: bool = False
    """Runs the planner (counts against the solver budget)."""


@dataclass
class LoopResult:
    answer: str | None
    turns: int
    stopped: str | None = None
    """Why the loop ended without a final answer (a budget ran out)."""
    calls: list[tuple[str, str]] = field(default_factory=list)
    """(tool, status) of every call, in order."""


def tool_params(tools: list[Tool]) -> list[dict[str, Any]]:
    """The `tools` request field, with strict JSON Schemas generated from the argument models."""
    from openai import pydantic_function_tool

    return [pydantic_function_tool(t.args, name=t.name, description=t.description) for t in tools]


def run_loop(client: LLMClient, messages: list[Message], tools: list[Tool]) -> LoopResult:
    """Run the conversation in `messages` (extended in place) until the model answers or a budget runs out."""
    budgets = client.settings.budgets
    by_name = {t.name: t for t in tools}
    params = tool_params(tools)
    seen: dict[tuple[str, str], str] = {}
    solver_calls = 0
    result = LoopResult(None, 0)
    for step in range(budgets.max_steps):
        final_turn = step == budgets.max_steps - 1
        turn = client.chat(messages, tools=None if final_turn else params)
        result.turns += 1
        messages.append(turn.as_message())
        if not turn.tool_calls:
            result.answer = (turn.content or "").strip() or None
            if result.answer is None:
                result.stopped = "the model gave an empty answer"
            return result
        for call in turn.tool_calls:
            tool = by_name.get(call.name)
            key = (call.name, _canonical(call.arguments))
            if final_turn:
                res = ToolResult(status="error", message="no more tool calls: the turn budget is spent")
            elif tool is None:
                res = ToolResult(status="error", message=f"there is no tool {call.name!r}; the tools are "
                                                          f"{', '.join(sorted(by_name))}")
            elif key in seen:
                res = ToolResult(status="error", message="same call as before; its result was: " + seen[key])
            elif tool.solves and solver_calls >= budgets.max_solver_calls:
                res = ToolResult(status="error", message=f"the budget of {budgets.max_solver_calls} solver calls "
                                                          "is spent; answer with what you have")
            else:
                res = _invoke(tool, call.arguments)
                if tool.solves and res.status in ("ok", "infeasible"):
                    solver_calls += 1
            content = _cut(res.model_dump_json(), budgets.max_tool_result_chars)
            if tool is not None and key not in seen:
                seen[key] = content
            result.calls.append((call.name, res.status))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    result.stopped = f"the model was still calling tools after {budgets.max_steps} turns"
    return result


def _invoke(tool: Tool, arguments: str) -> ToolResult:
    try:
        args = tool.args.model_validate_json(arguments or "{}")
    except PydanticValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            return ToolResult(status="error", message=f"the arguments are not valid JSON: {_cut(arguments, 200)}")
        detail = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                           for e in exc.errors(include_url=False)[:10])
        return ToolResult(status="error", message=f"invalid arguments for {tool.name}: {detail}")
    try:
        return tool.handler(args)
    except InfraError as exc:
        return ToolResult(status="error", message="; ".join(str(p) for p in exc.problems))


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True)
    except json.JSONDecodeError:
        return arguments


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 20] + " …(cut)"
