"""How a published Hugging Face id relates to the checkpoint it was made from.

Quantized re-uploads keep the original repository name and add a format suffix (`Qwen/Qwen3-32B-FP8`,
`nvidia/Qwen3-32B-NVFP4`, `RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8`), often under another organisation
(nvidia/, RedHatAI/, neuralmagic/, unsloth/ republish other publishers' models). Only the format suffix is dropped:
size, active-parameter, version and date parts (`-32B`, `-A3B`, `-0324`) name a different model and stay.
"""

from __future__ import annotations

import re

# Format suffix -> the weight precision it publishes (catalog `Precision`), most specific first; None where the
# catalog names no such format. W4A8 keeps 4-bit integer weights, which the catalog's int4 (W4A16) counts the same;
# bitsandbytes 4-bit (NF4) likewise.
_FORMATS: tuple[tuple[str, str | None], ...] = (
    (r"fp8(?:[-_](?:dynamic|static|block|blockwise|kv))?", "fp8"),
    (r"(?:nv|mx)?fp4(?:[-_]v\d+)?", "fp4"),
    (r"awq(?:[-_]int4)?", "int4"),
    (r"gptq(?:[-_]int4)?", "int4"),
    (r"gptq[-_]int8", "int8"),
    (r"int4", "int4"), (r"int8", "int8"),
    (r"w4a16", "int4"), (r"w4a8", "int4"), (r"w8a8", "int8"), (r"w8a16", "int8"),
    (r"quantized\.w4a\d+", "int4"), (r"quantized\.w8a\d+", "int8"), (r"quantized\.w\d+a\d+", None),
    (r"bf16", "bf16"), (r"fp16", "fp16"),
    (r"(?:unsloth[-_])?bnb[-_]4bit", "int4"),
)
_QUANT_SUFFIX = re.compile(r"[-_](?:" + "|".join(p for p, _ in _FORMATS) + r")$", re.IGNORECASE)


def _suffixes(ref: str) -> tuple[str, list[str]]:
    """(the id without its format suffixes, the suffixes from the last inwards, each without its separator)."""
    out, found = ref, []
    while True:
        m = _QUANT_SUFFIX.search(out)
        if m is None or m.start() <= out.rfind("/") + 1:
            return out, found
        found.append(m.group(0)[1:])
        out = out[:m.start()]


def strip_format(ref: str) -> str:
    """The id without its quantization/format suffixes (several may be stacked, e.g. `-AWQ-Int4`); the id itself
    when it has none. Never strips the whole repository name."""
    return _suffixes(ref)[0]


def implied_precision(ref: str) -> str | None:
    """The weight precision an id's format suffixes publish (`nvidia/Qwen3-32B-NVFP4` -> fp4, `-AWQ-Int4` -> int4,
    `-FP8-dynamic` -> fp8); None when it has no suffix, one the catalog names no precision for, or stacked suffixes
    that disagree."""
    found = {next(p for pattern, p in _FORMATS if re.fullmatch(pattern, suffix, re.IGNORECASE))
             for suffix in _suffixes(ref)[1]}
    return found.pop() if len(found) == 1 else None


_SPELLINGS = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "fp32": "fp32",
              "w4afp8": "int4", "int4_wo": "int4", "int8_wo": "int8", "fp8_e4m3": "fp8"}
"""Names frameworks and benchmark records give a weight format besides the checkpoint suffixes above."""


def precision_named(name: str) -> str | None:
    """The catalog precision a format name stands for, as a checkpoint suffix (`nvfp4`, `fp8_block`, `awq`) or a
    framework's dtype (`bfloat16`, `w4afp8`); None when it names none."""
    key = name.strip().lower()
    if key in _SPELLINGS:
        return _SPELLINGS[key]
    return next((p for pattern, p in _FORMATS if re.fullmatch(pattern, key, re.IGNORECASE)), None)


def repo_name(ref: str) -> str:
    """The repository part of an id (`Qwen3-32B` of `nvidia/Qwen3-32B`); a bare name is its own repository."""
    return ref.rsplit("/", 1)[-1]


def checkpoint_precision(ref: str, hf_id: str) -> str | None:
    """The precision `ref` publishes when it is a quantized re-upload of the checkpoint `hf_id`: a Hugging Face id
    (organisation/name, not a config.json) other than `hf_id` whose format suffix names a precision. None when `ref`
    is `hf_id`, a catalog name or alias without such a suffix, or a file; such references serve `hf_id` itself."""
    if "/" not in ref or ref.endswith(".json") or ref.lower() == hf_id.lower():
        return None
    return implied_precision(ref)
