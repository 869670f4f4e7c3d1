"""The one place that talks to the language model: chat turns (with tools, streamed or not) and structured answers.

Servers differ, so the capability flags of `LLMSettings` pick the path: `response_format` with the JSON Schema
where structured outputs work, else a request for JSON validated here; either way the answer is validated
locally and, when it fails, sent back once more with the errors (bounded by `budgets.max_repairs`). Every failure
of the endpoint becomes an `EndpointError` with one line that never contains the API key.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from infra.agent.settings import LLMSettings
from infra.errors import EndpointError

M = TypeVar("M", bound=BaseModel)
Message = dict[str, Any]

# vLLM, SGLang and llama.cpp accept any bearer token when they run without one; the client insists on some value.
NO_KEY = "none"


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    """The arguments as the model wrote them: a JSON string, untrusted."""


@dataclass
class Turn:
    """One assistant reply."""

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    refusal: str | None = None

    def as_message(self) -> Message:
        msg: Message = {"role": "assistant", "content": self.content or ""}
        if self.tool_calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}} for c in self.tool_calls]
        return msg


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class LLMClient:
    """Chat-completions client for one configured endpoint."""

    def __init__(self, settings: LLMSettings):
        from openai import OpenAI

        self.settings = settings
        self._secret = settings.api_key.get_secret_value() if settings.api_key else None
        self._structured = settings.capabilities.structured_outputs
        self._client = OpenAI(base_url=settings.base_url, api_key=self._secret or NO_KEY,
                              timeout=settings.timeout_s, max_retries=settings.max_retries)

    @property
    def label(self) -> str:
        """How provenance names this model: the model and the endpoint's host, never a credential."""
        from urllib.parse import urlsplit

        return f"{self.settings.model} at {urlsplit(self.settings.base_url).hostname or 'the configured endpoint'}"

    @property
    def where(self) -> str:
        """The endpoint as messages name it: without credentials in the URL or query."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(self.settings.base_url)
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))

    def _redact(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        import openai

        where = self.where
        try:
            yield
        except openai.APITimeoutError:
            raise EndpointError(f"the LLM endpoint {where} did not answer within {self.settings.timeout_s:g} s — "
                                "To fix: check the server, or raise INFRA_LLM_TIMEOUT") from None
        except openai.APIConnectionError as exc:
            raise EndpointError(f"cannot reach the LLM endpoint {where}: {self._redact(_short(exc.__cause__ or exc))}"
                                " — To fix: check INFRA_LLM_BASE_URL and that the server runs") from None
        except openai.AuthenticationError:
            raise EndpointError(f"the LLM endpoint {where} refused the credentials (HTTP 401) — To fix: set "
                                "INFRA_LLM_API_KEY to a valid key") from None
        except openai.APIStatusError as exc:
            raise EndpointError(f"the LLM endpoint {where} answered HTTP {exc.status_code}: "
                                f"{self._redact(_short(exc.message))} — To fix: check the server's log and that "
                                f"model {self.settings.model!r} is served there") from None
        except openai.APIResponseValidationError as exc:
            raise EndpointError(f"the LLM endpoint {where} sent a reply that is not chat-completions data: "
                                f"{self._redact(_short(exc))} — To fix: check that it is OpenAI-compatible") from None

    def _common(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.settings.model,
                               self.settings.capabilities.token_limit_field: self.settings.budgets.max_tokens}
        if self.settings.temperature is not None:
            out["temperature"] = self.settings.temperature
        return out

    def chat(self, messages: list[Message], tools: list[dict[str, Any]] | None = None,
             response_format: dict[str, Any] | None = None) -> Turn:
        """One assistant turn; with `tools`, the model may call them instead of answering; with
        `response_format`, the endpoint is asked to constrain the answer to it."""
        kwargs = self._common()
        if tools:
            kwargs.update(tools=tools, tool_choice="auto")
        if response_format is not None:
            kwargs["response_format"] = response_format
        with self._errors():
            if self.settings.capabilities.streaming:
                turn = self._stream(messages, kwargs)
            else:
                resp = self._client.chat.completions.create(messages=messages, **kwargs)
                if not resp.choices:
                    raise EndpointError(f"the LLM endpoint {self.where} sent a reply without choices — "
                                        "To fix: check that it is OpenAI-compatible")
                choice = resp.choices[0]
                msg = choice.message
                calls = [ToolCall(c.id, c.function.name, c.function.arguments or "")
                         for c in (msg.tool_calls or []) if c.type == "function"]
                turn = Turn(msg.content, calls, choice.finish_reason, getattr(msg, "refusal", None))
        if turn.refusal:
            raise EndpointError(f"the model refused: {_short(turn.refusal)} — To fix: rephrase the request")
        if turn.finish_reason == "content_filter":
            raise EndpointError("the endpoint's content filter stopped the reply — To fix: rephrase the request")
        return turn

    def _stream(self, messages: list[Message], kwargs: dict[str, Any]) -> Turn:
        text: list[str] = []
        refusal: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        finish = None
        for chunk in self._client.chat.completions.create(messages=messages, stream=True, **kwargs):
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                if getattr(delta, "refusal", None):
                    refusal.append(delta.refusal)
                for tc in delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    slot["id"] = tc.id or slot["id"]
                    if tc.function is not None:
                        slot["name"] += tc.function.name or ""
                        slot["arguments"] += tc.function.arguments or ""
                finish = choice.finish_reason or finish
        # Some servers stream no call ids; the tool replies still need one each.
        return Turn("".join(text) or None, [ToolCall(c["id"] or f"call_{i}", c["name"], c["arguments"])
                                           for i, c in sorted(calls.items())], finish, "".join(refusal) or None)

    def structured(self, messages: list[Message], model: type[M],
                   check: Callable[[M], list[str]] | None = None) -> M:
        """An answer parsed into `model`, re-validated here and by `check` (problems as text); a failed answer
        is sent back with its problems up to `budgets.max_repairs` times, then an EndpointError lists them."""
        from openai import pydantic_function_tool

        # The SDK's strict schema (every field required, no extra keys), as `parse` would send it.
        schema = pydantic_function_tool(model)["function"]["parameters"]
        fmt = {"type": "json_schema", "json_schema": {"name": model.__name__, "schema": schema, "strict": True}}
        messages = list(messages)
        problems: list[str] = []
        for _ in range(self.settings.budgets.max_repairs + 1):
            turn = None
            if self._structured:
                try:
                    turn = self.chat(messages, response_format=fmt)
                except EndpointError as exc:
                    if "HTTP 400" not in str(exc):
                        raise
                    # The server does not take a JSON Schema response_format: ask for JSON in words from now on.
                    self._structured = False
            if turn is None:
                ask = ("Answer with one JSON object, nothing else, matching this JSON Schema:\n"
                       + json.dumps(schema, sort_keys=True))
                turn = self.chat([*messages, {"role": "user", "content": ask}])
            if turn.finish_reason == "length":
                raise EndpointError(f"the model's reply was cut at {self.settings.budgets.max_tokens} tokens — To "
                                    "fix: raise budgets.max_tokens in the LLM settings")
            raw = turn.content or ""
            try:
                obj = model.model_validate_json(_json_block(raw))
                problems = check(obj) if check is not None else []
            except PydanticValidationError as exc:
                problems = _pydantic_problems(exc)
            if not problems:
                return obj
            messages += [{"role": "assistant", "content": raw},
                         {"role": "user", "content": "That answer was rejected:\n- " + "\n- ".join(problems)
                          + "\nAnswer again with the whole corrected JSON object."}]
        raise EndpointError(f"the model's answer was still invalid after {self.settings.budgets.max_repairs + 1} "
                            f"tries: {_short('; '.join(problems), 600)} — To fix: rephrase the request, or use a "
                            "stronger model")


def _json_block(text: str | None) -> str:
    """The JSON object in a reply that may wrap it in a code fence or a sentence."""
    text = (text or "").strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fence:
        text = fence.group(1).strip()
    start, end = text.find("{"), text.rfind("}")
    return text[start:end + 1] if 0 <= start < end else text


def _pydantic_problems(exc: PydanticValidationError) -> list[str]:
    out = []
    for err in exc.errors(include_url=False)[:20]:
        where = ".".join(str(p) for p in err["loc"]) or "(the answer)"
        out.append(f"{where}: {err['msg']}")
    return out
