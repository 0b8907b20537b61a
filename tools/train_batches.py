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
# Role of the second copy of a random-token span (induction rows) after its
# first token: predictable only by copying from the first copy; logged
# separately. The first copy and the first token of the second have role
# passkey.ROLE_KEY (random tokens with no cue to them: no loss).
ROLE_INDUCT = 4


INDUCT_MIN_SPAN = 4
INDUCT_MAX_SPAN = 32
INDUCT_GAP = 4  # text tokens at least between two spans
INDUCT_MEAN_SLOT = 16  # about the mean span (log-uniform 4..32: 12.3) plus the gap


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
    * induction (`induct_frac`): a text row into which pairs of random-token
      spans are written (`induct_every` row tokens per pair, spans of 4 to 32
      tokens, log-uniform), the second copy of each at a random later place. Random tokens
      carry no bigram statistics, so the second copy is predictable only by
      matching the earlier copy and reading on, at any distance: the circuit
      passkey retrieval uses, with a loss gap of ln(vocab) per token that makes
      it form in a few hundred steps where natural repeated text needs far more.
      A share `induct_digits` of the spans draws from the ten digit tokens,
      where one matching token is ambiguous and the match must use the tokens
      before it, as a key's digits do;
    * passkey (`passkey_frac`): a share `passkey_full` of them is one document
      of the row's length (the distances the evaluation asks for); the others
      hold documents packed back to back, each of log-uniform length between
      `passkey_min` and what is left of the row, so that retrieval is learned
      first on short haystacks and every stage keeps short ones.

    Row order in a batch: repeated text, induction, plain text, passkey.
    """

    def __init__(self, train: np.ndarray, haystack: pk.Haystack, enc: pk.PasskeyEncoder,
                 bos_id: int | None, passkey_frac: float, seed: int, repeat_frac: float = 0.0,
                 passkey_min: int = 64, repeat_min: int = 16, passkey_full: float = 1.0,
                 induct_frac: float = 0.0, induct_every: int = 128, vocab_size: int = 0,
                 induct_digits: float = 0.5, key_digits: tuple[int, int] = (4, 7)):
        if passkey_frac + repeat_frac + induct_frac > 1.0:
            raise SystemExit(f"--passkey-frac {passkey_frac} + --repeat-frac {repeat_frac} + "
                             f"--induct-frac {induct_frac} exceeds 1")
        if induct_frac > 0 and induct_every < 2 * INDUCT_MEAN_SLOT:
            raise SystemExit(f"--induct-every {induct_every} is less than two mean spans of "
                             f"{INDUCT_MEAN_SLOT} tokens (with their gap)")
        self.train = train
        self.haystack = haystack
        self.enc = enc
        self.bos_id = bos_id
        self.passkey_frac = passkey_frac
        self.repeat_frac = repeat_frac
        self.passkey_min = passkey_min
        self.repeat_min = repeat_min
        self.passkey_full = passkey_full
        self.induct_frac = induct_frac
        self.induct_every = induct_every
        self.induct_digits = induct_digits
        self.key_digits = key_digits
        # Random spans draw from the ordinary tokens (below the first special
        # one) or from the ten single-digit tokens.
        specials = [i for i in (bos_id, enc.eos_id) if i is not None]
        limit = min(specials + [vocab_size or int(train.max()) + 1])
        self.pool = np.arange(limit, dtype=np.int64)
        digits = [enc.tokenizer.token_to_id(str(d)) for d in range(10)]
        if any(d is None for d in digits):
            raise SystemExit("the tokenizer has no single-digit tokens 0-9")
        self.digits = np.asarray(digits, dtype=np.int64)
        self.rng = np.random.default_rng(seed)

    @staticmethod
    def _share(frac: float, rows: int) -> int:
        n = min(rows, int(round(frac * rows)))
        return max(1, n) if frac > 0 else n

    def __call__(self, rows: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        n_pk = self._share(self.passkey_frac, rows)
        n_rep = min(rows - n_pk, self._share(self.repeat_frac, rows))
        n_ind = min(rows - n_pk - n_rep, self._share(self.induct_frac, rows))
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
        for r in range(n_rep, n_rep + n_ind):
            self._induct(tokens[r], roles[r], lead)
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

    def _induct(self, row: np.ndarray, role: np.ndarray, lead: int) -> None:
        """Writes pairs of random-token spans into the row, one pair per
        `induct_every` tokens: the 2 x pairs spans are placed uniformly at
        random among all placements that keep at least INDUCT_GAP text tokens
        between them, in a random order (so that no fixed distance or
        alignment gives the copy away), and the earlier span of each pair is
        the original."""
        n = row.size - lead
        pairs = max(1, n // self.induct_every)
        lo, hi = math.log(INDUCT_MIN_SPAN), math.log(INDUCT_MAX_SPAN + 1)
        lengths = np.minimum(INDUCT_MAX_SPAN,
                             np.exp(self.rng.uniform(lo, hi, size=pairs)).astype(np.int64))
        # Rarely the drawn spans do not fit the row: drop pairs until they do.
        while pairs > 0 and 2 * int(lengths[:pairs].sum()) + 2 * pairs * INDUCT_GAP > n:
            pairs -= 1
        if pairs == 0:
            return  # a row too short for one pair stays plain text
        lengths = lengths[:pairs]
        order = self.rng.permutation(np.repeat(np.arange(pairs), 2))
        sizes = lengths[order] + INDUCT_GAP
        free = n - int(sizes.sum())
        starts = lead + np.sort(self.rng.integers(0, free + 1, size=order.size)) \
            + np.concatenate([[0], np.cumsum(sizes[:-1])])
        digit = self.rng.random(pairs) < self.induct_digits
        draws = self.rng.random((pairs, INDUCT_MAX_SPAN))
        spans = np.where(digit[:, None], self.digits[(draws * self.digits.size).astype(np.int64)],
                         self.pool[(draws * self.pool.size).astype(np.int64)])
        seen = np.zeros(pairs, dtype=bool)
        for p, a in zip(order.tolist(), starts.tolist()):
            k = int(lengths[p])
            row[a:a + k] = spans[p, :k]
            role[a:a + k] = pk.ROLE_KEY
            if seen[p]:
                # the copy's first token has no cue to it: no loss, like the original
                role[a + 1:a + k] = ROLE_INDUCT
            seen[p] = True

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
            i, r = pk.training_sample(self.enc, self.haystack, n, self.rng, *self.key_digits)
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
        ind = np.flatnonzero(role == ROLE_INDUCT)
        if ind.size:
            # every maximal run of induction targets repeats the tokens of an
            # earlier run of the same length with role ROLE_KEY
            runs = np.split(ind, np.flatnonzero(np.diff(ind) != 1) + 1)
            for run in runs:
                b, n = int(run[0]), int(run.size)
                earlier = np.lib.stride_tricks.sliding_window_view(row[:b], n)
                keyed = np.lib.stride_tricks.sliding_window_view(role[:b] == pk.ROLE_KEY, n)
                if not ((earlier == row[b:b + n]).all(axis=1) & keyed.all(axis=1)).any():
                    raise SystemExit(f"batch check: row {r}: the {n}-token induction span at "
                                     f"{b} has no earlier copy")
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
