"""Writes a small Llama-architecture checkpoint with deterministic random
weights and the project's tokenizer, so that `specpipe generate` runs on a
fresh clone before (or without) the trained default model.

    python3 tools/make_random_model.py --tokenizer models/default/tokenizer.json --out DIR

Same arguments, same bytes: weights come from a fixed torch seed and are saved
in bf16 through transformers' save_pretrained.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json to ship with the model")
    ap.add_argument("--out", required=True, help="output checkpoint directory")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = json.loads(Path(args.tokenizer).read_text())
    vocab = max([v for v in tok["model"]["vocab"].values()] +
                [t["id"] for t in tok.get("added_tokens", [])]) + 1
    specials = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    bos = specials.get("<|begin_of_text|>")
    eos = specials.get("<|end_of_text|>")

    torch.manual_seed(args.seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 11 // 4,
                      num_hidden_layers=args.layers, num_attention_heads=args.hidden // 128,
                      num_key_value_heads=max(1, args.hidden // 256), head_dim=128,
                      max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=True, bos_token_id=bos, eos_token_id=eos,
                      torch_dtype="bfloat16")
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    shutil.copy(args.tokenizer, out / "tokenizer.json")
    tc = Path(args.tokenizer).with_name("tokenizer_config.json")
    if tc.exists():
        shutil.copy(tc, out / "tokenizer_config.json")
    print(f"wrote {out}: vocab {vocab}, hidden {args.hidden}, layers {args.layers}")


if __name__ == "__main__":
    main()
