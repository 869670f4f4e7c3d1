"""Where the language model is and what it can do: endpoint, timeouts, retries, capabilities and budgets.

Precedence, highest first: `INFRA_LLM_*` variables, `OPENAI_*` variables, the settings file
(`INFRA_LLM_SETTINGS`, else `$XDG_CONFIG_HOME/infra/llm.yaml`), defaults. With no base URL and no model from any
of them, no endpoint is configured and the features that need one say how to configure it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic import ValidationError as PydanticValidationError

from infra.errors import EndpointError, IntentError, Location, Problem
from infra.intent.yamlio import load_yaml, read_text

CONFIGURE_HINT = ("set INFRA_LLM_BASE_URL (e.g. http://localhost:8000/v1) and INFRA_LLM_MODEL, and INFRA_LLM_API_KEY "
                  "if the endpoint needs one (OPENAI_BASE_URL, OPENAI_MODEL and OPENAI_API_KEY also work), or write "
                  "them as base_url, model, api_key in ~/.config/infra/llm.yaml")


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Capabilities(_Settings):
    """What the endpoint supports; servers differ (vLLM, SGLang, Ollama, llama.cpp), so these are data."""

    structured_outputs: bool = True
    """`response_format` with a JSON Schema is honoured; off: ask for JSON, validate, retry with the errors."""
    tools: bool = True
    """Function tool calls work; off: the agent loop cannot run (plan --agent, review's free-form questions)."""
    streaming: bool = False
    """Stream text replies (server-sent events) instead of waiting for the whole reply."""
    token_limit_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """How the endpoint spells the reply-length limit (OpenAI's reasoning models take only
    `max_completion_tokens`; most self-hosted servers take `max_tokens`)."""


class Budgets(_Settings):
    """Bounds on one conversation, so that a model that never stops cannot keep the user waiting."""

    max_steps: int = Field(default=6, ge=1, le=50)
    """Model turns in one tool loop."""
    max_solver_calls: int = Field(default=4, ge=0, le=20)
    """Patched intents solved in one tool loop (each takes seconds)."""
    max_repairs: int = Field(default=2, ge=0, le=5)
    """Retries of a structured answer that failed validation, each sent back with the errors."""
    max_tokens: int = Field(default=2048, ge=64)
    """Most tokens per reply."""
    max_tool_result_chars: int = Field(default=6000, ge=500)
    """Tool results are cut to this size before they go back to the model."""


class LLMSettings(_Settings):
    """A configured OpenAI-compatible endpoint."""

    base_url: str
    """Endpoint root, e.g. `https://api.openai.com/v1` or `http://localhost:8000/v1`."""
    model: str
    """Model name as the endpoint knows it."""
    api_key: SecretStr | None = None
    """Bearer token; never written to a prompt, a log, a plan or a file."""
    timeout_s: float = Field(default=60.0, gt=0)
    """Seconds to wait for one reply."""
    max_retries: int = Field(default=2, ge=0, le=10)
    """Retries on connection errors, 408/409/429 and 5xx (by the client, with backoff)."""
    temperature: float | None = Field(default=0.0, ge=0, le=2)
    """Sampling temperature; null sends none (for models that accept only their default)."""
    capabilities: Capabilities = Capabilities()
    budgets: Budgets = Budgets()


def settings_path(env: Mapping[str, str]) -> Path:
    if env.get("INFRA_LLM_SETTINGS"):
        return Path(env["INFRA_LLM_SETTINGS"])
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "infra" / "llm.yaml"


def _file_values(path: Path) -> dict[str, Any]:

    if not path.is_file():
        return {}
    data, _ = load_yaml(read_text(path, "LLM settings"), str(path))
    if not isinstance(data, dict):
        raise IntentError(Problem("LLM settings must be a mapping", Location(str(path), 1, 1),
                                  "write keys such as base_url: and model:"))
    return data


_ENV = {  # setting -> variables, first set wins
    "base_url": ("INFRA_LLM_BASE_URL", "OPENAI_BASE_URL"),
    "model": ("INFRA_LLM_MODEL", "OPENAI_MODEL"),
    "api_key": ("INFRA_LLM_API_KEY", "OPENAI_API_KEY"),
    "timeout_s": ("INFRA_LLM_TIMEOUT",),
    "max_retries": ("INFRA_LLM_MAX_RETRIES",),
}
_CAP_ENV = {"structured_outputs": "INFRA_LLM_STRUCTURED_OUTPUTS", "tools": "INFRA_LLM_TOOLS",
            "streaming": "INFRA_LLM_STREAMING"}


def load_settings(env: Mapping[str, str] | None = None) -> LLMSettings | None:
    """The configured endpoint, or None when none is configured; a malformed setting is an error naming it."""
    env = os.environ if env is None else env
    path = settings_path(env)
    values = _file_values(path)
    for key, names in _ENV.items():
        for name in names:
            if env.get(name):
                values[key] = env[name]
                break
    caps = dict(values.get("capabilities") or {})
    for key, name in _CAP_ENV.items():
        if env.get(name):
            caps[key] = env[name].strip().lower() in ("1", "true", "yes", "on")
    if caps:
        values["capabilities"] = caps
    if not values.get("base_url") and not values.get("model"):
        return None
    missing = [k for k in ("base_url", "model") if not values.get(k)]
    if missing:
        raise EndpointError(f"the LLM endpoint has no {' or '.join(missing)} — To fix: {CONFIGURE_HINT}")
    try:
        return LLMSettings.model_validate(values)
    except PydanticValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        raise EndpointError(f"LLM setting {where}: {err['msg']} (from {', '.join(_ENV.get(where, ()))} or {path})"
                            " — To fix: give a valid value") from None


def require_settings(env: Mapping[str, str] | None = None) -> LLMSettings:
    """The configured endpoint, or an error (exit 1) that says how to configure one."""
    settings = load_settings(env)
    if settings is None:
        raise EndpointError(f"no LLM endpoint is configured — To fix: {CONFIGURE_HINT}")
    return settings
