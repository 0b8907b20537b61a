"""Training batches of tools/train_model.py: plain, repeated-text and passkey
rows, each BOS + a window with a role per token (passkey.ROLE_* and ROLE_COPY).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import passkey as pk  # noqa: E402

# Role of the second copy in a repeated-text row: ordinary language-model loss,
# counted separately in the log because its accuracy shows induction forming.
ROLE_COPY = 3


def log_uniform_int(rng: np.random.Generator, lo: int, hi: int) -> int:
    """An integer in [lo, hi], log-uniform: as many draws in 64..128 as in
    4096..8192, so short cases stay frequent while the token mass spreads
    evenly over the range."""
    if hi <= lo:
        return lo
    return int(min(hi, math.floor(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))))


class Batcher:
    """Builds training batches with numpy, each row `length + 1` tokens with a
    role per token. Three kinds of rows:

    * text: BOS + a random window of the packed training tokens;
    * repeated text (`repeat_frac`): a text row in which a span (log-uniform
      length, 16 .. half the row) reappears verbatim at a random later place.
      Every token of the second copy is predictable only by finding the first
      copy and reading the token after the current one there: the induction
      (previous-token + copy) circuit that passkey retrieval needs, trained on
      thousands of targets per row rather than the few answer tokens of a
      passkey document (Olsson et al. 2022, "In-context learning and induction
      heads");
    * passkey (`passkey_frac`): a share `passkey_full` of them is one document
      of the row's length (the distances the evaluation asks for); the others
      hold documents packed back to back, each of log-uniform length between
      `passkey_min` and what is left of the row, so that retrieval is learned
      first on short haystacks and every stage keeps short ones.
    """

    def __init__(self, train: np.ndarray, haystack: pk.Haystack, enc: pk.PasskeyEncoder,
                 bos_id: int | None, passkey_frac: float, seed: int, repeat_frac: float = 0.0,
                 passkey_min: int = 64, repeat_min: int = 16, passkey_full: float = 1.0):
        if passkey_frac + repeat_frac > 1.0:
            raise SystemExit(f"--passkey-frac {passkey_frac} + --repeat-frac {repeat_frac} "
                             "exceeds 1")
        self.train = train
        self.haystack = haystack
        self.enc = enc
        self.bos_id = bos_id
        self.passkey_frac = passkey_frac
        self.repeat_frac = repeat_frac
        self.passkey_min = passkey_min
        self.repeat_min = repeat_min
        self.passkey_full = passkey_full
        self.rng = np.random.default_rng(seed)

    @staticmethod
    def _share(frac: float, rows: int) -> int:
        n = min(rows, int(round(frac * rows)))
        return max(1, n) if frac > 0 else n

    def __call__(self, rows: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        n_pk = self._share(self.passkey_frac, rows)
        n_rep = min(rows - n_pk, self._share(self.repeat_frac, rows))
        n_text = rows - n_pk
        lead = 0 if self.bos_id is None else 1
        tokens = np.empty((rows, length + 1), dtype=np.int64)
        roles = np.zeros((rows, length + 1), dtype=np.uint8)
        span = length + 1 - lead
        if self.train.size <= span:
            raise SystemExit(f"training data holds {self.train.size} tokens, fewer than one "
                             f"row of {span}")
        starts = self.rng.integers(0, self.train.size - span, size=n_text)
        if lead:
            tokens[:n_text, 0] = self.bos_id
        tokens[:n_text, lead:] = self.train[starts[:, None] + np.arange(span)]
        for r in range(n_rep):
            self._repeat(tokens[r], roles[r], lead)
        for r in range(n_text, rows):
            tokens[r], roles[r] = self._passkey_row(length + 1)
        return tokens, roles

    def _repeat(self, row: np.ndarray, role: np.ndarray, lead: int) -> None:
        """Copies a span of the row's text to a later place in the same row."""
        n = row.size - lead
        s = log_uniform_int(self.rng, min(self.repeat_min, n // 2), n // 2)
        a = lead + int(self.rng.integers(0, n - 2 * s + 1))
        b = int(self.rng.integers(a + s, lead + n - s + 1))
        row[b:b + s] = row[a:a + s]
        role[b:b + s] = ROLE_COPY

    def _passkey_row(self, total: int) -> tuple[np.ndarray, np.ndarray]:
        """Passkey documents of random lengths filling exactly `total` tokens."""
        if total < self.passkey_min:
            raise SystemExit(f"rows of {total} tokens are shorter than --passkey-min "
                             f"{self.passkey_min}")
        ids, roles, left = [], [], total
        full = self.rng.random() < self.passkey_full
        while left > 0:
            n = left if full else log_uniform_int(self.rng, self.passkey_min, left)
            if left - n < self.passkey_min:
                n = left  # the remainder would be too short for a document of its own
            i, r = pk.training_sample(self.enc, self.haystack, n, self.rng)
            ids.append(i)
            roles.append(r)
            left -= n
        return np.concatenate(ids), np.concatenate(roles)


def check_batch(tokens: np.ndarray, roles: np.ndarray, bos_id: int | None, eos_id: int) -> None:
    """Checks one batch's invariants before training on it: every repeated
    span is a verbatim copy of an earlier span of its row, and every passkey
    document ends in answer + EOS and (with a BOS) starts with BOS."""
    for r in range(tokens.shape[0]):
        row, role = tokens[r], roles[r]
        copy = np.flatnonzero(role == ROLE_COPY)
        if copy.size:
            b, n = int(copy[0]), int(copy.size)
            if copy[-1] - b + 1 != n:
                raise SystemExit(f"batch check: row {r}: repeated span is not contiguous")
            earlier = np.lib.stride_tricks.sliding_window_view(row[:b], n)
            if not (earlier == row[b:b + n]).all(axis=1).any():
                raise SystemExit(f"batch check: row {r}: the {n}-token span at {b} has no "
                                 "earlier copy")
        answer = role == pk.ROLE_ANSWER
        if answer.any():
            ends = np.flatnonzero(answer[:-1] & ~answer[1:]) + 1
            if ends.size == 0 or not (row[ends] == eos_id).all() or ends[-1] != row.size - 1:
                raise SystemExit(f"batch check: row {r}: a passkey answer is not followed by "
                                 "EOS, or the row does not end with one")
            if bos_id is not None:
                starts = np.concatenate([[0], ends[:-1] + 1])
                if not (row[starts] == bos_id).all():
                    raise SystemExit(f"batch check: row {r}: a packed passkey document does "
                                     "not start with BOS")
