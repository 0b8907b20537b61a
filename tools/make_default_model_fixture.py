"""Reference logits of the embedded default model from Hugging Face
transformers, for tests/model/default_model_test.cpp.

    python3 tools/make_default_model_fixture.py [--model models/default] \
        [--out tests/data/default_model/logits.json]

The bf16 checkpoint is upcast to f32 (as specpipe's CPU path computes), the
prompts are tokenized with the `tokenizers` library, and the logits of the last
few positions of each prompt are written. Works with transformers 4.x (which
reads `rope_theta`) and 5.x (which writes `rope_parameters`).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

PROMPTS = [
    "It was a dark and stormy night; the rain fell in torrents, except at occasional intervals.",
    "CHAPTER I.\n\nThe old man looked at the sea and said: \"We shall not see her again.\"",
]
POSITIONS = 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="models/default")
    ap.add_argument("--out", default="tests/data/default_model/logits.json")
    args = ap.parse_args()

    import torch
    import transformers
    from tokenizers import Tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    model_dir = Path(args.model)
    raw = json.loads((model_dir / "config.json").read_text())
    rp = raw.get("rope_parameters")
    if rp and int(transformers.__version__.split(".")[0]) < 5:
        raw["rope_theta"] = rp["rope_theta"]
        if rp.get("rope_type", "default") != "default":
            raw["rope_scaling"] = {k: v for k, v in rp.items() if k != "rope_theta"}
    if int(transformers.__version__.split(".")[0]) < 5:
        raw.pop("rope_parameters", None)  # 4.x: read from rope_theta / rope_scaling above
    cfg = LlamaConfig(**raw)
    # The value the logits are computed with, whichever form the config took.
    theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", getattr(cfg, "rope_theta", None))
    if rp and theta != rp["rope_theta"]:
        raise SystemExit(f"LlamaConfig kept rope_theta {theta}, the checkpoint has {rp['rope_theta']}")
    cfg._attn_implementation = "eager"
    model = LlamaForCausalLM.from_pretrained(model_dir, config=cfg, torch_dtype=torch.float32).eval()
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))

    prompts, logits = [], []
    with torch.no_grad():
        for text in PROMPTS:
            ids = tok.encode(text, add_special_tokens=True).ids
            out = model(torch.tensor([ids])).logits[0, -POSITIONS:].float()
            prompts.append({"text": text, "ids": ids})
            logits.append([[float(f"{x:.7g}") for x in row.tolist()] for row in out])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__,
                               "positions": POSITIONS, "prompts": prompts, "logits": logits}))
    print(f"wrote {out}: {len(prompts)} prompts x {POSITIONS} positions")


if __name__ == "__main__":
    main()
