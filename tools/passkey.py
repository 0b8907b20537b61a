#!/usr/bin/env python3
"""Passkey-retrieval documents: a number hidden in book text, asked for at the end.

The trainer mixes these documents into its batches and evaluates on them; the
project's C++ evaluation reads the same documents (as written by the command
line below) or builds its own with the format described here.

Format (token level; every piece is encoded separately, without special
tokens, with the model's tokenizer.json, and the id lists are concatenated):

    prompt = [BOS] + H[0:p] + enc(NEEDLE) + H[p:m] + enc(QUESTION)
    answer = enc(ANSWER)

with the texts

    NEEDLE   = "\\nThe pass key is {key}. Remember it. {key} is the pass key.\\n"
    QUESTION = "\\nWhat is the pass key? The pass key is"
    ANSWER   = " {key}"

* ``key`` is a decimal number of ``digits`` digits, first digit non-zero
  (5 digits in evaluation; training draws its lengths from `--key-digits`
  of tools/train_model.py, 5 by default).
* ``H`` is a contiguous window of haystack tokens taken from inside one book
  of a packed split (tools/pack_corpus.py: never across the end-of-text id).
  Its length ``m`` is whatever makes ``len(prompt)`` equal the requested
  length exactly. [BOS] is present when the tokenizer has one.
* ``p = round(depth * m)``: depth 0 puts the needle right after BOS, depth 1
  right before the question.
* A training document of length L is ``prompt + answer + [EOS]`` with
  ``len(prompt) = L - len(answer) - 1``. Each token has a role: ROLE_TEXT
  (ordinary language-model loss), ROLE_KEY (the first statement of the key,
  which cannot be predicted: no loss) and ROLE_ANSWER (the answer tokens, which
  the trainer weights up).
* An evaluation sample of length L has ``len(prompt) = L - len(answer) - 1``,
  so that prompt, answer and one more token fit in L positions.
* Scoring: decode greedily at least ``len(answer)`` tokens after the prompt;
  the sample is correct when the decoded text, with leading whitespace
  removed, starts with the key and the next character (if any) is not a
  digit (see ``score``).
* Evaluation samples are deterministic: sample i of cell (length, depth index
  j) draws from ``numpy.random.default_rng([seed, length, j, i])`` in the
  order: book (uniform among books long enough), window start (uniform), key.

Command line (writes one JSON object per line: length, depth, key, prompt_ids,
answer_ids, prompt_text):

    python3 tools/passkey.py --tokenizer models/default/tokenizer.json \\
        --data .carry/corpus --split valid --out passkey_eval.jsonl
    python3 tools/passkey.py --tokenizer T --data D --self-test
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

NEEDLE = "\nThe pass key is {key}. Remember it. {key} is the pass key.\n"
QUESTION = "\nWhat is the pass key? The pass key is"
ANSWER = " {key}"

ROLE_TEXT = 0
ROLE_KEY = 1
ROLE_ANSWER = 2

EVAL_LENGTHS = (1024, 2048, 4096, 8192)
EVAL_DEPTHS = (0.05, 0.25, 0.5, 0.75, 0.95)


@dataclass
class Haystack:
    """Packed tokens of one split and the [start, end) range of each book."""

    tokens: np.ndarray  # uint16, books separated by EOS
    books: np.ndarray  # int64 [n, 2]
    _fits: dict = field(default_factory=dict)  # window size -> books long enough

    @staticmethod
    def load(data_dir: Path, split: str) -> "Haystack":
        meta_path = data_dir / "meta.json"
        array_path = data_dir / f"{split}.npy"
        for path in (meta_path, array_path):
            if not path.is_file():
                raise SystemExit(f"{path} does not exist: run tools/pack_corpus.py first")
        meta = json.loads(meta_path.read_text())
        if split not in meta.get("splits", {}):
            raise SystemExit(f"{meta_path}: no split '{split}' in 'splits'")
        books = np.array([[b["start"], b["end"]] for b in meta["splits"][split]["books"]],
                         dtype=np.int64).reshape(-1, 2)
        tokens = np.load(array_path, mmap_mode="r")
        if books.size and books[-1, 1] > tokens.size:
            raise SystemExit(f"{meta_path}: book range ends at {books[-1, 1]} but {array_path} "
                             f"holds {tokens.size} tokens")
        return Haystack(tokens=tokens, books=books)

    def window(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """A uniformly placed window of `size` tokens inside one book long enough."""
        lengths = self.books[:, 1] - self.books[:, 0]
        fits = self._fits.get(size)
        if fits is None:
            fits = self._fits[size] = np.flatnonzero(lengths >= size)
        if fits.size == 0:
            raise ValueError(f"no book holds {size} haystack tokens (longest: "
                             f"{int(lengths.max(initial=0))})")
        book = fits[rng.integers(fits.size)]
        start = self.books[book, 0] + rng.integers(lengths[book] - size + 1)
        return np.asarray(self.tokens[start:start + size], dtype=np.int64)


class PasskeyEncoder:
    """Encodes the fixed texts of the format with one tokenizer.

    Training builds thousands of documents a second, so needle and answer ids
    are assembled from the separately encoded text around the key and the
    key's ids, which are the ids of its runs of up to three digits (a
    Llama-3-style pre-tokenizer isolates those runs, so no merge crosses
    them). The constructor checks this against the tokenizer's own encoding of
    whole needles and answers for many keys, and falls back to encoding each
    text whole when a tokenizer behaves otherwise.
    """

    def __init__(self, tokenizer, bos_id: int | None, eos_id: int):
        self.tokenizer = tokenizer
        self.bos = [] if bos_id is None else [int(bos_id)]
        self.eos_id = int(eos_id)
        self.question = self._encode(QUESTION)
        self._chunks: dict[str, list[int]] = {}
        self._needle_parts = [self._encode(t) for t in NEEDLE.split("{key}")]
        self._answer_parts = [self._encode(t) for t in ANSWER.split("{key}")]
        self.fast = True
        rng = np.random.default_rng(12345)
        keys = [random_key(rng, 1, 9) for _ in range(300)] + ["1000", "10000", "999999", "1010101"]
        self.fast = all(self.needle(k) == self.needle_exact(k) and
                        self.answer(k) == self._encode(ANSWER.format(key=k)) for k in keys)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def key_ids(self, key: str) -> list[int]:
        """Ids of a decimal key: its runs of three digits from the left, each
        encoded once and cached."""
        ids = []
        for i in range(0, len(key), 3):
            chunk = key[i:i + 3]
            got = self._chunks.get(chunk)
            if got is None:
                got = self._chunks[chunk] = self._encode(chunk)
            ids.extend(got)
        return ids

    def _assembled(self, parts: list[list[int]], key: list[int]) -> list[int]:
        ids = list(parts[0])
        for part in parts[1:]:
            ids.extend(key)
            ids.extend(part)
        return ids

    def needle(self, key: str) -> tuple[list[int], list[int]]:
        """Needle ids and their roles: ROLE_KEY on the tokens of the first key."""
        if not self.fast:
            return self.needle_exact(key)
        k = self.key_ids(key)
        ids = self._assembled(self._needle_parts, k)
        n0 = len(self._needle_parts[0])
        roles = [ROLE_TEXT] * len(ids)
        roles[n0:n0 + len(k)] = [ROLE_KEY] * len(k)
        return ids, roles

    def needle_exact(self, key: str) -> tuple[list[int], list[int]]:
        """needle() by encoding the whole text (the reference for the fast path)."""
        text = NEEDLE.format(key=key)
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        k0 = text.index(key)
        k1 = k0 + len(key)
        roles = [ROLE_KEY if (a < k1 and b > k0) else ROLE_TEXT for a, b in enc.offsets]
        return enc.ids, roles

    def answer(self, key: str) -> list[int]:
        if not self.fast:
            return self._encode(ANSWER.format(key=key))
        return self._assembled(self._answer_parts, self.key_ids(key))

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)


def random_key(rng: np.random.Generator, min_digits: int, max_digits: int) -> str:
    digits = int(rng.integers(min_digits, max_digits + 1))
    return str(int(rng.integers(10 ** (digits - 1), 10 ** digits)))


def assemble(enc: PasskeyEncoder, hay: np.ndarray, key: str, depth: float,
             prompt_length: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(prompt ids, prompt roles, answer ids) with len(prompt) == prompt_length,
    taking the first m tokens of `hay` as haystack."""
    needle, needle_roles = enc.needle(key)
    fixed = len(enc.bos) + len(needle) + len(enc.question)
    m = prompt_length - fixed
    if m < 0:
        raise ValueError(f"passkey prompt of {prompt_length} tokens is shorter than its "
                         f"fixed parts ({fixed} tokens)")
    if hay.size < m:
        raise ValueError(f"haystack of {hay.size} tokens, {m} needed")
    p = int(round(depth * m))
    ids = np.concatenate([np.asarray(enc.bos, dtype=np.int64), hay[:p],
                          np.asarray(needle, dtype=np.int64), hay[p:m],
                          np.asarray(enc.question, dtype=np.int64)])
    roles = np.zeros(ids.size, dtype=np.uint8)
    off = len(enc.bos) + p
    roles[off:off + len(needle)] = needle_roles
    return ids, roles, enc.answer(key)


def training_sample(enc: PasskeyEncoder, haystack: Haystack, length: int,
                    rng: np.random.Generator, min_digits: int = 4,
                    max_digits: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """A training document of exactly `length` tokens: prompt + answer + EOS,
    with a role per token. Depth is uniform in [0, 1]."""
    key = random_key(rng, min_digits, max_digits)
    depth = float(rng.random())
    prompt_length = length - len(enc.answer(key)) - 1
    hay = haystack.window(rng, max(0, prompt_length))
    ids, roles, answer = assemble(enc, hay, key, depth, prompt_length)
    ids = np.concatenate([ids, np.asarray(answer + [enc.eos_id], dtype=np.int64)])
    roles = np.concatenate([roles, np.full(len(answer), ROLE_ANSWER, dtype=np.uint8),
                            np.zeros(1, dtype=np.uint8)])
    return ids, roles


@dataclass
class EvalSample:
    length: int
    depth: float
    key: str
    prompt_ids: np.ndarray
    answer_ids: list[int]


def eval_sample(enc: PasskeyEncoder, haystack: Haystack, length: int, depth_index: int,
                depth: float, index: int, seed: int, digits: int = 5) -> EvalSample:
    """Sample `index` of the evaluation cell (length, depth): a prompt of
    `length - len(answer) - 1` tokens and its expected answer ids."""
    rng = np.random.default_rng([seed, length, depth_index, index])
    hay = haystack.window(rng, length)
    key = random_key(rng, digits, digits)
    ids, _, answer = assemble(enc, hay, key, depth, length - len(enc.answer(key)) - 1)
    return EvalSample(length, depth, key, ids, answer)


def eval_set(enc: PasskeyEncoder, haystack: Haystack, lengths=EVAL_LENGTHS,
             depths=EVAL_DEPTHS, per_cell: int = 4, seed: int = 0) -> list[EvalSample]:
    return [eval_sample(enc, haystack, n, j, d, i, seed)
            for n in lengths for j, d in enumerate(depths) for i in range(per_cell)]


_LEADING_NUMBER = re.compile(r"\s*(\d+)")


def score(generated_text: str, key: str) -> bool:
    """True when the generated text states the key as its first number, whole."""
    match = _LEADING_NUMBER.match(generated_text)
    return bool(match) and match.group(1) == key


def load_encoder(tokenizer_path: Path, data_dir: Path | None = None) -> PasskeyEncoder:
    """The encoder for a tokenizer.json; BOS/EOS from the packed data's meta.json
    when given (so they match what the model was trained on)."""
    from tokenizers import Tokenizer

    if not tokenizer_path.is_file():
        raise SystemExit(f"tokenizer file {tokenizer_path} does not exist")
    tok = Tokenizer.from_file(str(tokenizer_path))
    if data_dir is not None and (data_dir / "meta.json").is_file():
        meta = json.loads((data_dir / "meta.json").read_text())
        return PasskeyEncoder(tok, meta["bos_id"], meta["eos_id"])
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pack_corpus import BOS_CANDIDATES, EOS_CANDIDATES, find_special

    _, bos = find_special(tok, BOS_CANDIDATES, None, "BOS", False)
    _, eos = find_special(tok, EOS_CANDIDATES, None, "EOS", True)
    return PasskeyEncoder(tok, bos, eos)


def self_test(enc: PasskeyEncoder, haystack: Haystack) -> None:
    """Checks the format's invariants on real data; raises AssertionError."""
    rng = np.random.default_rng(1)
    for length in (200, 257, 1024):
        ids, roles = training_sample(enc, haystack, length, rng)
        assert ids.size == length and roles.size == length, (ids.size, roles.size, length)
        assert ids[-1] == enc.eos_id
        text = enc.decode(ids[(roles == ROLE_ANSWER)])
        key = text.strip()
        assert key.isdigit() and 4 <= len(key) <= 7, text
        needle_text = NEEDLE.format(key=key)
        assert needle_text in enc.decode(ids), "needle text not found in the document"
        assert enc.decode(ids[roles == ROLE_KEY]).strip() == key
    a = eval_set(enc, haystack, lengths=(300,), depths=(0.0, 0.5, 1.0), per_cell=2, seed=7)
    b = eval_set(enc, haystack, lengths=(300,), depths=(0.0, 0.5, 1.0), per_cell=2, seed=7)
    for x, y in zip(a, b):
        assert x.key == y.key and np.array_equal(x.prompt_ids, y.prompt_ids), "not deterministic"
        assert x.prompt_ids.size + len(x.answer_ids) + 1 == 300
        assert enc.decode(x.prompt_ids).endswith(QUESTION)
        assert enc.decode(x.answer_ids) == ANSWER.format(key=x.key)
    needle0, _ = enc.needle(a[0].key)
    start = len(enc.bos)
    assert list(a[0].prompt_ids[start:start + len(needle0)]) == needle0, "depth 0 misplaced"
    q = len(enc.question)
    needle1, _ = enc.needle(a[4].key)
    assert list(a[4].prompt_ids[-q - len(needle1):-q]) == needle1, "depth 1 misplaced"
    assert enc.fast, "the tokenizer does not encode keys as runs of three digits"
    for _ in range(2000):
        key = random_key(rng, 1, 12)
        assert enc.needle(key) == enc.needle_exact(key), key
        assert enc.answer(key) == enc._encode(ANSWER.format(key=key)), key
    assert score(" 48213.", "48213") and score("48213", "48213")
    assert not score(" 482131", "48213") and not score(" 4821", "48213")
    assert not score(" the 48213", "48213")
    print("passkey: self-test passed", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", required=True, type=Path)
    ap.add_argument("--data", type=Path, default=Path(".carry/corpus"),
                    help="folder written by tools/pack_corpus.py")
    ap.add_argument("--split", default="valid", choices=("train", "valid"))
    ap.add_argument("--lengths", default=",".join(map(str, EVAL_LENGTHS)))
    ap.add_argument("--depths", default=",".join(map(str, EVAL_DEPTHS)))
    ap.add_argument("--per-cell", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="JSONL file to write")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args(argv)

    enc = load_encoder(args.tokenizer, args.data)
    haystack = Haystack.load(args.data, args.split)
    if args.self_test:
        self_test(enc, haystack)
        return
    lengths = [int(x) for x in args.lengths.split(",")]
    depths = [float(x) for x in args.depths.split(",")]
    samples = eval_set(enc, haystack, lengths, depths, args.per_cell, args.seed)
    out = open(args.out, "w") if args.out else sys.stdout
    with out:
        for s in samples:
            out.write(json.dumps({"length": s.length, "depth": s.depth, "key": s.key,
                                  "prompt_ids": s.prompt_ids.tolist(),
                                  "answer_ids": s.answer_ids,
                                  "prompt_text": enc.decode(s.prompt_ids)}) + "\n")
    if args.out:
        print(f"passkey: wrote {len(samples)} samples to {args.out}", flush=True)


if __name__ == "__main__":
    main()
