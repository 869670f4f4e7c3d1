"""A model from a Hugging Face `config.json`, for models the catalog does not list.

Reads the fields of the common architectures (Llama/Qwen/Mistral, Mixtral, Qwen-MoE, DeepSeek-V2/V3 with MLA,
gpt-oss, multimodal wrappers with a `text_config`) and counts parameters from the shapes, since config files do
not state them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from infra.catalog.schema import AttentionLayout, MLASpec, MoESpec, ModelSpec
from infra.errors import CatalogError, Location, Problem
from infra.limits import loads_json, read_limited


def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def param_breakdown(
    *, layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int, ffn: int, vocab: int, tied: bool,
    moe: MoESpec | None, mla: MLASpec | None, shared_ffn: int | None = None,
) -> dict[str, float]:
    """Parameters by part, from the layer shapes: `attn` and `dense_ffn` per layer, `expert` (one routed expert),
    `shared` (the shared experts of one MoE layer), `router` per MoE layer, and `embed` (input and output)."""
    if mla is not None:
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        q = hidden * mla.q_lora_rank + mla.q_lora_rank * heads * qk if mla.q_lora_rank else hidden * heads * qk
        kv = hidden * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank * heads * (
            mla.qk_nope_head_dim + mla.v_head_dim)
        attn = q + kv + heads * mla.v_head_dim * hidden
    else:
        attn = hidden * head_dim * (2 * heads + 2 * kv_heads)
    out = {"attn": float(attn), "dense_ffn": 3.0 * hidden * ffn, "embed": float(vocab * hidden * (1 if tied else 2)),
           "expert": 0.0, "shared": 0.0, "router": 0.0}
    if moe is not None:
        out["expert"] = 3.0 * hidden * moe.expert_ffn_size
        out["shared"] = 3.0 * hidden * shared_ffn if shared_ffn else moe.shared_experts * out["expert"]
        out["router"] = float(hidden * moe.experts)
    return out


def count_params(**shape: Any) -> tuple[float, float]:
    """(total, active) parameters in billions, from the layer shapes."""
    p = param_breakdown(**shape)
    layers, moe = shape["layers"], shape["moe"]
    if moe is None:
        total = layers * (p["attn"] + p["dense_ffn"]) + p["embed"]
        return total / 1e9, total / 1e9
    moe_layers = layers - moe.dense_layers
    base = (layers * p["attn"] + moe.dense_layers * p["dense_ffn"] + moe_layers * (p["shared"] + p["router"])
            + p["embed"])
    return ((base + moe_layers * moe.experts * p["expert"]) / 1e9,
            (base + moe_layers * moe.active_experts * p["expert"]) / 1e9)


def model_from_hf_config(path: Path) -> ModelSpec:
    """Build a ModelSpec from a config.json; errors name the file and the missing field."""
    file = str(path)
    try:
        cfg = loads_json(read_limited(path, "model config", error=CatalogError).decode("utf-8"), file,
                         error=CatalogError)
    except FileNotFoundError:
        raise CatalogError(Problem("model config.json not found", Location(file),
                                   "check the path, or use a catalog model name")) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(Problem(f"cannot read model config: {exc}", Location(file),
                                   "check the file and its permissions")) from None
    except json.JSONDecodeError as exc:
        raise CatalogError(Problem(f"invalid JSON: {exc.msg}", Location(file, exc.lineno, exc.colno),
                                   "fix the JSON syntax")) from None
    if not isinstance(cfg, dict):
        raise CatalogError(Problem("config.json must hold an object", Location(file),
                                   "use the model's Hugging Face config.json, a JSON object of its settings"))
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}

    def need(*keys: str) -> int:
        value = _first(cfg, *keys)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise CatalogError(Problem(f"missing or invalid {keys[0]!r}", Location(file, path=keys[0]),
                                       "a Hugging Face transformer config.json has it; check the file"))
        return value

    layers = need("num_hidden_layers", "n_layer", "num_layers")
    hidden = need("hidden_size", "d_model", "n_embd")
    heads = need("num_attention_heads", "n_head")
    kv_heads = _first(cfg, "num_key_value_heads", default=heads)
    head_dim = _first(cfg, "head_dim", default=hidden // heads)
    vocab = need("vocab_size")
    ffn = _first(cfg, "intermediate_size", "ffn_dim", default=4 * hidden)
    experts = _first(cfg, "n_routed_experts", "num_local_experts", "num_experts")
    moe = None
    shared_ffn = None
    if experts:
        active = need("num_experts_per_tok", "experts_per_token", "num_experts_per_token")
        moe = MoESpec(
            experts=experts, active_experts=active, shared_experts=_first(cfg, "n_shared_experts", default=0) or 0,
            expert_ffn_size=_first(cfg, "moe_intermediate_size", default=ffn),
            dense_layers=_first(cfg, "first_k_dense_replace", default=0) or 0,
        )
        shared_ffn = _first(cfg, "shared_expert_intermediate_size")
        if shared_ffn and not moe.shared_experts:
            moe = moe.model_copy(update={"shared_experts": 1})
    mla = None
    if cfg.get("kv_lora_rank"):
        mla = MLASpec(kv_lora_rank=cfg["kv_lora_rank"], q_lora_rank=cfg.get("q_lora_rank"),
                      qk_rope_head_dim=need("qk_rope_head_dim"), qk_nope_head_dim=need("qk_nope_head_dim"),
                      v_head_dim=need("v_head_dim"))
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    layer_types = cfg.get("layer_types") or []
    sliding = sum(1 for t in layer_types if "sliding" in str(t))
    linear = sum(1 for t in layer_types if "linear" in str(t))
    window = cfg.get("sliding_window") if (sliding or cfg.get("use_sliding_window")) else None
    if window and not sliding:
        sliding = layers
    total, active_b = count_params(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                   ffn=ffn, vocab=vocab, tied=bool(cfg.get("tie_word_embeddings")), moe=moe,
                                   mla=mla, shared_ffn=shared_ffn)
    name = cfg.get("_name_or_path") or path.parent.name or "custom-model"
    try:
        return ModelSpec(
            name=str(name), hf_id=str(name), family=str(cfg.get("model_type", "custom")), layers=layers,
            hidden_size=hidden, attention_heads=heads, kv_heads=kv_heads, head_dim=head_dim, ffn_size=ffn,
            vocab_size=vocab, max_context=_first(cfg, "max_position_embeddings", "n_positions", default=4096),
            moe=moe, mla=mla,
            attention=AttentionLayout(sliding_window=window, sliding_window_layers=sliding if window else 0,
                                      linear_attention_layers=linear,
                                      linear_key_heads=cfg.get("linear_num_key_heads") or 0,
                                      linear_value_heads=cfg.get("linear_num_value_heads") or 0,
                                      linear_key_dim=cfg.get("linear_key_head_dim") or 128,
                                      linear_value_dim=cfg.get("linear_value_head_dim") or 128,
                                      linear_conv_kernel=cfg.get("linear_conv_kernel_dim") or 4,
                                      sparse_topk=cfg.get("index_topk") or None,
                                      indexer_heads=cfg.get("index_n_heads") or 0,
                                      indexer_head_dim=cfg.get("index_head_dim") or 128),
            params_total_b=round(total, 3), params_active_b=round(active_b, 3),
            native_precision="bf16" if str(cfg.get("torch_dtype", "bfloat16")) != "float16" else "fp16",
            source=path.resolve().as_uri(), confidence="medium",
            note="read from a local config.json; parameter counts computed from the layer shapes",
        )
    except PydanticValidationError as exc:
        err = exc.errors()[0]
        raise CatalogError(Problem(err["msg"].removeprefix("Value error, "),
                                   Location(file, path=".".join(map(str, err["loc"]))),
                                   "check the config.json values")) from None
