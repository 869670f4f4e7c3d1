"""infra: an intent compiler for LLM serving.

Declare a model, its load, latency objectives, budget and inventory; get a verified deployment. The public API is
`infra.api`; the names below are its most used parts, loaded on first use as the facade's are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infra.errors import CatalogError, InfraError, IntentError

if TYPE_CHECKING:
    from infra.api import check, load_catalog, load_intent, schema

__version__ = "0.1.0"

__all__ = ["CatalogError", "InfraError", "IntentError", "check", "load_catalog", "load_intent", "schema",
           "__version__"]


def __getattr__(name: str) -> Any:
    if name not in ("check", "load_catalog", "load_intent", "schema"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from infra import api

    return getattr(api, name)
