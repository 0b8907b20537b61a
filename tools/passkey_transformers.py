#!/usr/bin/env python3
"""Rerun `specpipe eval passkey --documents FILE` through transformers.

Each line of FILE holds one passkey document (prompt ids, answer ids, key) and
what every specpipe cache mode answered. This decodes the same prompts
greedily with transformers' LlamaForCausalLM (len(answer) + 1 tokens, stopping
at an end-of-sequence id, as specpipe does) and reports, per document, whether
the two answers are the same token for token and whether each is right. Where
they differ it prints the top-two logit margin transformers saw at the first
differing position: a margin near zero is a rounding tie, not a bug.

Example (the model, and the documents of a 4k/8k run):

  specpipe eval passkey --text ../shared/corpus/pg/245.txt --lengths 4k,8k \\
      --depths 0.05,0.5,0.95 --samples 3 --documents /tmp/pk.jsonl
  python3 tools/passkey_transformers.py /tmp/pk.jsonl --model models/default
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch

from passkey import score  # the scoring rule of specpipe's eval passkey (tools/passkey.py)


@torch.no_grad()
def greedy(model, prompt: list[int], steps: int, eos: set[int], device: str):
    """Greedy ids after the prompt, and each step's top-two margin (logit1 - logit2)."""
    ids = torch.tensor([prompt], dtype=torch.long, device=device)
    out = model(input_ids=ids, use_cache=True)
    past, logits = out.past_key_values, out.logits[0, -1]
    got, margins = [], []
    for _ in range(steps):
        top = torch.topk(logits.float(), 2)
        nxt = int(top.indices[0])
        margins.append(float(top.values[0] - top.values[1]))
        if nxt in eos:
            break
        got.append(nxt)
        if len(got) == steps:
            break
        out = model(input_ids=torch.tensor([[nxt]], device=device), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]
    return got, margins


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("documents", type=Path, help="JSON Lines from specpipe eval passkey --documents")
    ap.add_argument("--model", type=Path, default=Path("models/default"))
    ap.add_argument("--mode", default="full", help="the specpipe mode to compare against (default full)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    ap.add_argument("--json", type=Path, help="write the per-document comparison here")
    args = ap.parse_args()

    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    docs = [json.loads(line) for line in args.documents.read_text().splitlines() if line.strip()]
    if not docs:
        print(f"{args.documents}: no documents", file=sys.stderr)
        return 2
    missing = [i for i, d in enumerate(docs) if args.mode not in d.get("answers", {})]
    if missing:
        have = sorted(docs[missing[0]].get("answers", {}))
        print(f"{args.documents}: line {missing[0] + 1} has no answer for mode '{args.mode}' (has {have})",
              file=sys.stderr)
        return 2

    dtype = getattr(torch, args.dtype)
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=dtype).to(args.device).eval()
    tok = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    gen = model.generation_config
    eos = gen.eos_token_id if isinstance(gen.eos_token_id, list) else [gen.eos_token_id]
    eos = {int(e) for e in eos if e is not None}

    rows, t0 = [], time.time()
    for i, d in enumerate(docs):
        ours = d["answers"][args.mode]
        theirs, margins = greedy(model, d["prompt_ids"], len(d["answer_ids"]) + 1, eos, args.device)
        text = tok.decode(theirs)
        same = theirs == ours["ids"]
        first_diff = next((j for j, (a, b) in enumerate(zip(theirs, ours["ids"])) if a != b),
                          None if len(theirs) == len(ours["ids"]) else min(len(theirs), len(ours["ids"])))
        rows.append({"length": d["length"], "depth": d["depth"], "sample": d["sample"], "key": d["key"],
                     "specpipe": ours["text"], "specpipe_correct": ours["correct"],
                     "transformers": text, "transformers_correct": score(text, d["key"]),
                     "same_ids": same, "first_difference": first_diff,
                     "margin_there": None if first_diff is None or first_diff >= len(margins)
                     else margins[first_diff],
                     "min_margin": min(margins) if margins else None})
        print(f"\r{i + 1}/{len(docs)} documents, {time.time() - t0:.0f} s", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)

    print(f"{'length':>6} {'depth':>5} {'key':>8}  {'specpipe':<12} {'transformers':<12} same  margin")
    for r in rows:
        margin = r["margin_there"] if r["margin_there"] is not None else r["min_margin"]
        mark = lambda ok: "+" if ok else "-"
        print(f"{r['length']:>6} {r['depth']:>5.2f} {r['key']:>8}  "
              f"{mark(r['specpipe_correct'])}{r['specpipe'].strip()[:11]:<11} "
              f"{mark(r['transformers_correct'])}{r['transformers'].strip()[:11]:<11} "
              f"{'yes ' if r['same_ids'] else 'NO  '} {margin:.3f}")
    for length in sorted({r["length"] for r in rows}):
        sel = [r for r in rows if r["length"] == length]
        print(f"length {length}: specpipe {sum(r['specpipe_correct'] for r in sel)}/{len(sel)}, "
              f"transformers {sum(r['transformers_correct'] for r in sel)}/{len(sel)}, "
              f"same answer {sum(r['same_ids'] for r in sel)}/{len(sel)}")
    if args.json:
        args.json.write_text(json.dumps({"documents": str(args.documents), "model": str(args.model),
                                         "mode": args.mode, "dtype": args.dtype, "rows": rows}, indent=1) + "\n")
    return 0 if all(r["same_ids"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
