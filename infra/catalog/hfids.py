"""How a published Hugging Face id relates to the checkpoint it was made from.

Quantized re-uploads keep the original repository name and add a format suffix (`Qwen/Qwen3-32B-FP8`,
`nvidia/Qwen3-32B-NVFP4`, `RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8`), often under another organisation
(nvidia/, RedHatAI/, neuralmagic/, unsloth/ republish other publishers' models). Only the format suffix is dropped:
size, active-parameter, version and date parts (`-32B`, `-A3B`, `-0324`) name a different model and stay.
"""

from __future__ import annotations

import re

_SUFFIXES = (
    r"fp8(?:[-_](?:dynamic|static|block|blockwise|kv))?",
    r"(?:nv|mx)?fp4(?:[-_]v\d+)?",
    r"awq(?:[-_]int4)?",
    r"gptq(?:[-_]int[48])?",
    r"int[48]",
    r"w4a16", r"w4a8", r"w8a8", r"w8a16",
    r"quantized\.w\d+a\d+",
    r"bf16", r"fp16",
    r"(?:unsloth[-_])?bnb[-_]4bit",
)
_QUANT_SUFFIX = re.compile(r"[-_](?:" + "|".join(_SUFFIXES) + r")$", re.IGNORECASE)


def strip_format(ref: str) -> str:
    """The id without its quantization/format suffixes (several may be stacked, e.g. `-AWQ-Int4`); the id itself
    when it has none. Never strips the whole repository name."""
    out = ref
    while True:
        m = _QUANT_SUFFIX.search(out)
        if m is None or m.start() <= out.rfind("/") + 1:
            return out
        out = out[:m.start()]


def repo_name(ref: str) -> str:
    """The repository part of an id (`Qwen3-32B` of `nvidia/Qwen3-32B`); a bare name is its own repository."""
    return ref.rsplit("/", 1)[-1]
