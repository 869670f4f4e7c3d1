"""Write a tiny random LlamaForCausalLM with its own tokenizer in Hugging Face format, for a real engine on a CPU.

Nothing is downloaded: a byte-level BPE tokenizer is trained here on a synthetic corpus (the load client's prompt
words among it, so a prompt word is about one token) and the weights are random. Residual dimension 0 of every
token embedding carries a constant, and the output head pushes end-of-sequence, the other special tokens and
every token that does not decode to printable ASCII on its own far down through that dimension: generation runs
to max_tokens and every token streams as its own chunk, which keeps output lengths exact for benchmarking.

Run with the engine's Python (it has torch, transformers and tokenizers):

    python make_tiny_model.py OUT_DIR [--embd 512 --layers 8 --ff 1408 --heads 8 --kv-heads 4]
"""

from __future__ import annotations

import argparse
import json
import os
import random

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CORPUS_WORDS = ("the of and to in is on it at as be by or an we us so if no up go do my he me all can new one two "
                "day way sun red sea map key box car dog cat run big old set top man far art quick brown fox jumps "
                "over lazy river light shadow wind rain hello world model token latency server stream batch").split()
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--embd", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--ff", type=int, default=1408)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    torch.manual_seed(a.seed)

    corpus = [" ".join(rng.choice(CORPUS_WORDS) for _ in range(30)) for _ in range(2000)]
    corpus += ["".join(chr(c) for c in range(32, 127))] * 10
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=a.vocab, min_frequency=2, special_tokens=["<s>", "</s>", "<unk>"],
                            show_progress=False)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>")
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(a.out)
    n_vocab = len(tok)

    cfg = LlamaConfig(vocab_size=n_vocab, hidden_size=a.embd, intermediate_size=a.ff, num_hidden_layers=a.layers,
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=a.ctx,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, torch_dtype="float32")
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            elif "embed_tokens" in name:
                p.normal_(0, 0.1)
                p[:, 0] = 1.0
            elif "lm_head" in name:
                p.normal_(0, 1.0)
                p[:, 0] = 1.0
                for tid in range(n_vocab):
                    text = tok.decode([tid])
                    if tid in tok.all_special_ids or not text or not all(32 <= ord(c) < 127 for c in text):
                        p[tid, :] = 0.0
                        p[tid, 0] = -4.0
            else:
                p.normal_(0, 0.02)
    model.save_pretrained(a.out, safe_serialization=True)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}, f)
    print(f"wrote {a.out}: vocab={n_vocab} params={sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")


if __name__ == "__main__":
    main()
