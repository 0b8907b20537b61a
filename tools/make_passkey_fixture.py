#!/usr/bin/env python3
"""Writes tests/data/eval/passkey_ref.json: passkey prompts built by
tools/passkey.py's assemble() from a short haystack text, for the C++ builder
(model/eval_passkey.*) to reproduce id for id.

    python3 tools/make_passkey_fixture.py --tokenizer models/default/tokenizer.json \\
        --haystack tests/data/eval/haystack.txt --out tests/data/eval/passkey_ref.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from passkey import assemble, load_encoder  # noqa: E402

CASES = (("48213", 0.0, 200), ("90517", 0.5, 300), ("12345", 1.0, 257), ("70001", 0.25, 150),
         ("55555", 0.75, 333))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", required=True, type=Path)
    ap.add_argument("--haystack", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    enc = load_encoder(args.tokenizer)
    text = args.haystack.read_text(encoding="utf-8")
    hay = enc.tokenizer.encode(text, add_special_tokens=False).ids
    cases = []
    for key, depth, length in CASES:
        ids, _, answer = assemble(enc, np.asarray(hay, dtype=np.int64), key, depth, length)
        cases.append({"key": key, "depth": depth, "prompt_length": length,
                      "prompt_ids": ids.tolist(), "answer_ids": answer})
    args.out.write_text(json.dumps({"haystack_ids": hay, "cases": cases}) + "\n")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
