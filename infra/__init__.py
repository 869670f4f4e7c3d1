"""infra: an intent compiler for LLM serving.

Declare a model, its load, latency objectives, budget and inventory; get a verified deployment. The public API is
`infra.api`; the names below are its most used parts.
"""

from infra.api import check, load_catalog, load_intent, schema
from infra.errors import CatalogError, InfraError, IntentError

__version__ = "0.1.0"

__all__ = ["CatalogError", "InfraError", "IntentError", "check", "load_catalog", "load_intent", "schema",
           "__version__"]
