"""Trains the default model's tokenizer: a Llama-3-style byte-level BPE.

    python3 tools/train_tokenizer.py [--corpus DIR] [--out models/default]

Writes OUT/tokenizer.json and OUT/tokenizer_config.json. The tokenizer has
4096 ids: 4096 - len(SPECIALS) learned byte-level BPE tokens (the 256 byte
symbols first), then the special tokens at the top, as Llama-3 places its
<|begin_of_text|> etc. above the BPE vocabulary. The pipeline is Llama-3's:
the Split regex below (Isolated) followed by ByteLevel(use_regex=False), BPE
with ignore_merges, a ByteLevel decoder and a TemplateProcessing
post-processor that prepends <|begin_of_text|>.

Only the training books of the fixed split (tools/corpus.py) are read, so that
validation text stays unseen. Each book contributes at most --max-book-bytes
from its start (a deterministic subsample that keeps training to well under a
minute). The `tokenizers` BPE trainer breaks count ties by the pair itself, so
the same corpus gives the same file on every run; `--check` trains twice and
verifies that.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import corpus_dir, split_books  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

# Llama-3's pre-tokenizer pattern, verbatim from Meta's tokenizer.json: letters
# with at most one leading non-letter, digit runs of 1-3, punctuation runs,
# newlines, and whitespace that does not swallow the space before a word.
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

VOCAB_SIZE = 4096
BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
SPECIALS = [BOS, EOS, "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"] + [
    f"<|reserved_special_token_{i}|>" for i in range(3)
]


def training_text(corpus: Path, max_book_bytes: int) -> list[str]:
    """The first max_book_bytes of each training book, cut at a line end."""
    train, _ = split_books(corpus)
    texts = []
    for path in train:
        text = path.read_text(encoding="utf-8")
        if len(text) > max_book_bytes:
            cut = text.rfind("\n", 0, max_book_bytes)
            text = text[: cut if cut > 0 else max_book_bytes]
        texts.append(text)
    return texts


def build(texts: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(SPECIALS),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Paragraphs, not whole books, so the trainer's batches stay small.
    tok.train_from_iterator((p for t in texts for p in t.split("\n\n")), trainer=trainer)
    tok.add_special_tokens(SPECIALS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS}:1 $B:1",
        special_tokens=[(BOS, tok.token_to_id(BOS))])
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise SystemExit(f"trained {tok.get_vocab_size()} tokens, expected {VOCAB_SIZE}")
    return tok


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 131072,
        "model_input_names": ["input_ids", "attention_mask"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", help="corpus folder (default: tools/corpus.py's)")
    ap.add_argument("--out", default=str(REPO / "models" / "default"))
    ap.add_argument("--max-book-bytes", type=int, default=1_000_000)
    ap.add_argument("--check", action="store_true", help="train twice, require identical output")
    args = ap.parse_args()

    texts = training_text(corpus_dir(args.corpus), args.max_book_bytes)
    blob = build(texts).to_str(pretty=True)
    if args.check and build(texts).to_str(pretty=True) != blob:
        raise SystemExit("two training runs differ: training is not deterministic")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(blob + "\n", encoding="utf-8")
    (out / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config(), indent=2) + "\n", encoding="utf-8")
    digest = hashlib.sha256(blob.encode()).hexdigest()[:16]
    print(f"wrote {out}/tokenizer.json ({VOCAB_SIZE} tokens, {sum(map(len, texts))} chars "
          f"of {len(texts)} books, sha256 {digest})")


if __name__ == "__main__":
    main()
