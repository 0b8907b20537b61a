#!/usr/bin/env python3
"""Tokenizes the book corpus into packed uint16 token arrays for training.

Usage (from the repository root):

    python3 tools/pack_corpus.py --tokenizer models/default/tokenizer.json --out .carry/corpus

Writes into the output folder:

* ``train.npy`` / ``valid.npy``: one uint16 array per split, the books of the
  fixed split of tools/corpus.py in that order, each book's tokens followed by
  the end-of-text id. Books are encoded whole, without special tokens.
* ``meta.json``: the tokenizer's vocabulary size, the BOS/EOS ids and token
  strings, a SHA-256 of the tokenizer.json (so the trainer can refuse data
  packed with another tokenizer), and per split the book ids with the
  [start, end) token range of each book (EOS excluded).

The training array is capped (``--max-train-mb``, default 40 MB) so that it
can be carried to the machine that trains; books past the cap are truncated
and the cut is reported.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import corpus_dir, split_books  # noqa: E402

BOS_CANDIDATES = ("<|begin_of_text|>", "<s>", "<|startoftext|>")
EOS_CANDIDATES = ("<|end_of_text|>", "<|endoftext|>", "</s>", "<|eot_id|>")


def find_special(tokenizer, candidates: tuple[str, ...], explicit: str | None, what: str,
                 required: bool) -> tuple[str | None, int | None]:
    """The (token, id) of the BOS or EOS token: the explicit one or the first
    candidate the vocabulary has."""
    names = (explicit,) if explicit else candidates
    for name in names:
        tid = tokenizer.token_to_id(name)
        if tid is not None:
            return name, tid
    if required:
        raise SystemExit(f"tokenizer has no {what} token: looked for {', '.join(names)} "
                         f"(pass --{what.lower()}-token)")
    return None, None


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_book(path: Path) -> str:
    # The corpus files are already stripped of the Project Gutenberg header and
    # license; only normalize line endings so that CRLF files tokenize alike.
    return path.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")


def pack_split(tokenizer, books: list[Path], eos_id: int, max_tokens: int | None,
               name: str) -> tuple[np.ndarray, list[dict]]:
    texts = [read_book(p) for p in books]
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    parts: list[np.ndarray] = []
    index: list[dict] = []
    total = 0
    for path, enc in zip(books, encodings):
        ids = np.asarray(enc.ids, dtype=np.int64)
        if max_tokens is not None and total + len(ids) + 1 > max_tokens:
            keep = max(0, max_tokens - total - 1)
            print(f"pack: {name} cap of {max_tokens} tokens reached: book {path.stem} cut "
                  f"from {len(ids)} to {keep} tokens, later books dropped", flush=True)
            ids = ids[:keep]
        if len(ids) == 0:
            break
        index.append({"book": path.stem, "start": total, "end": total + len(ids)})
        parts.append(ids)
        parts.append(np.array([eos_id], dtype=np.int64))
        total += len(ids) + 1
        if max_tokens is not None and total >= max_tokens - 1:
            break
    packed = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return packed.astype(np.uint16), index


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", required=True, type=Path, help="tokenizer.json")
    ap.add_argument("--out", type=Path, default=Path(".carry/corpus"), help="output folder")
    ap.add_argument("--corpus", default=None, help="corpus folder (default: tools/corpus.py's)")
    ap.add_argument("--max-train-mb", type=float, default=40.0,
                    help="cap on train.npy in MB (uint16 tokens)")
    ap.add_argument("--max-books", type=int, default=None,
                    help="use only the first N training books (quick tests)")
    ap.add_argument("--bos-token", default=None)
    ap.add_argument("--eos-token", default=None)
    args = ap.parse_args(argv)

    from tokenizers import Tokenizer

    if not args.tokenizer.is_file():
        raise SystemExit(f"tokenizer file {args.tokenizer} does not exist")
    tokenizer = Tokenizer.from_file(str(args.tokenizer))
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    if vocab > 65536:
        raise SystemExit(f"tokenizer {args.tokenizer} has {vocab} tokens: uint16 packing "
                         "needs at most 65536")
    bos_tok, bos_id = find_special(tokenizer, BOS_CANDIDATES, args.bos_token, "BOS", False)
    eos_tok, eos_id = find_special(tokenizer, EOS_CANDIDATES, args.eos_token, "EOS", True)

    train_books, valid_books = split_books(corpus_dir(args.corpus))
    if args.max_books is not None:
        train_books = train_books[:args.max_books]
        valid_books = valid_books[:max(1, args.max_books // 4)]
    max_train = int(args.max_train_mb * 1e6 // 2)

    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    meta = {
        "tokenizer_sha256": file_sha256(args.tokenizer),
        "vocab_size": vocab,
        "bos_token": bos_tok, "bos_id": bos_id,
        "eos_token": eos_tok, "eos_id": eos_id,
        "splits": {},
    }
    for name, books, cap in (("train", train_books, max_train), ("valid", valid_books, None)):
        packed, index = pack_split(tokenizer, books, eos_id, cap, name)
        np.save(args.out / f"{name}.npy", packed)
        chars = sum(len(read_book(p)) for p in books[:len(index)])
        meta["splits"][name] = {"tokens": int(packed.size), "books": index,
                                "chars_per_token": round(chars / max(1, packed.size), 3)}
        print(f"pack: {name}: {len(index)} books, {packed.size} tokens "
              f"({packed.nbytes / 1e6:.1f} MB, {chars / max(1, packed.size):.2f} chars/token)",
              flush=True)
    (args.out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"pack: wrote {args.out} in {time.time() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
