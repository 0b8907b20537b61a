"""Builds the tokenizer test fixtures under tests/data/tokenizers/.

    python3 tools/train_tokenizer.py            # first: models/default/
    python3 tools/make_tokenizer_fixtures.py [--corpus DIR]

Two fixture tokenizers:
  * bytelevel/: a copy of models/default/ (Llama-3 style byte-level BPE);
  * spm/: a small sentencepiece-style BPE trained here, laid out as Llama-2's
    tokenizer.json is: ids 0-2 <unk> <s> </s>, ids 3-258 the <0xNN> byte
    tokens, then the learned pieces; normalizer Prepend("▁") + Replace(" ",
    "▁"), no pre-tokenizer, byte_fallback, and the decoder
    Replace("▁", " ") + ByteFallback + Fuse + Strip(" ", 1, 0).
For each, cases.json records what the `tokenizers` library (the reference)
gives for a list of tricky strings: ids with and without special tokens, and
the decoded text with and without skipping special tokens. The C++ tests
compare against these. Everything is deterministic.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import corpus_dir, split_books  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "tokenizers"

SPM_VOCAB = 800
SPM_SPECIALS = ["<unk>", "<s>", "</s>"]
SPM_BYTES = [f"<0x{b:02X}>" for b in range(256)]


def spm_training_text(corpus: Path) -> list[str]:
    """Paragraphs from the first 60 kB of each of the first 8 training books."""
    train, _ = split_books(corpus)
    out = []
    for path in train[:8]:
        out.extend(path.read_text(encoding="utf-8")[:60_000].split("\n\n"))
    return out


def train_spm(corpus: Path) -> Tokenizer:
    # Train on words split Metaspace-style so that pieces never span a "▁"
    # boundary, as sentencepiece's own trainer does; the shipped file then
    # drops the pre-tokenizer, as Llama-2's tokenizer.json has none.
    learn = Tokenizer(models.BPE(unk_token="<unk>"))
    learn.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    learn.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    learned = SPM_VOCAB - len(SPM_SPECIALS) - len(SPM_BYTES)
    # A small alphabet leaves rare characters (CJK, emoji, most accents) out
    # of the vocabulary, so byte fallback is exercised.
    trainer = trainers.BpeTrainer(vocab_size=learned, limit_alphabet=70, min_frequency=2,
                                  show_progress=False)
    learn.train_from_iterator(spm_training_text(corpus), trainer=trainer)
    state = json.loads(learn.to_str())["model"]

    vocab = {t: i for i, t in enumerate(SPM_SPECIALS + SPM_BYTES)}
    for token, _ in sorted(state["vocab"].items(), key=lambda kv: kv[1]):
        if token not in vocab:
            vocab[token] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]

    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(SPM_SPECIALS)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", 1)])
    return tok


def spm_config() -> dict:
    return {"tokenizer_class": "LlamaTokenizerFast", "bos_token": {"content": "<s>", "lstrip": False,
            "normalized": False, "rstrip": False, "single_word": False},
            "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False}


def cases(corpus: Path, specials: list[str]) -> list[str]:
    _, valid = split_books(corpus)
    book = valid[0].read_text(encoding="utf-8")
    start = book.find("\n\n", len(book) // 2) + 2
    paragraph = book[start:start + 1500]
    bos, eos = specials[0], specials[1]
    return [
        "", " ", "  ", "\t", "\n", "\n\n\n", " \n ", "a", "Hello world", "hello  world",
        " leading space", "trailing space ", "   three leading", "tabs\tand\t\ttabs",
        "line one\nline two\r\nline three\n", "multiple   spaces    here",
        "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe", "e\u0301 combining a\u0308 marks",
        "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
        "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!", "\u03b1\u03b2\u03b3 \u0394\u03b4",
        "1 12 123 1234 12345 1234567890", "3.14159 and 2,718 and 1e10", "\u0661\u0662\u0663 \u0664\u0665",
        "I'm you're he's we've they'll I'd don't", "I'M YOU'RE HE'S WE'VE THEY'LL I'D DON'T",
        "O'Neil's 'quoted' rock'n'roll", "\u201cCurly quotes\u201d and \u2018single\u2019 \u2014 dashes\u2026",
        "emoji \U0001F600\U0001F44D\U0001F3FD", "family \U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 zwj",
        "flags \U0001F1EB\U0001F1F7\U0001F1EF\U0001F1F5", "punctuation!!! ??? ... ;;; --- ***",
        "code: int main() { return 0; }", "URL https://example.org/a?b=c&d=e#f",
        f"{bos}text after bos", f"text {eos} more", f"{bos}{eos}{bos}", f" {bos} spaced {eos} ",
        f"{bos}", "<|not_a_token|> <s2> </s3>", "mixed\u00a0nbsp\u3000ideographic space",
        "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9 repeated", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        paragraph,
    ]


def record(tok: Tokenizer, texts: list[str]) -> list[dict]:
    out = []
    for text in texts:
        with_sp = tok.encode(text, add_special_tokens=True).ids
        without = tok.encode(text, add_special_tokens=False).ids
        out.append({
            "text": text,
            "ids": with_sp,
            "ids_no_special": without,
            "decoded": tok.decode(with_sp, skip_special_tokens=True),
            "decoded_keep_special": tok.decode(with_sp, skip_special_tokens=False),
        })
    return out


def write(name: str, tok_dir: Path, specials: list[str], corpus: Path) -> None:
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    doc = {"tokenizer": name, "vocab_size": tok.get_vocab_size(with_added_tokens=True),
           "cases": record(tok, cases(corpus, specials))}
    (tok_dir / "cases.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n",
                                        encoding="utf-8")
    trips = sum(c["decoded"] == c["text"] for c in doc["cases"])
    print(f"{name}: {len(doc['cases'])} cases, {trips} round-trip, vocab {doc['vocab_size']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", help="corpus folder (default: tools/corpus.py's)")
    args = ap.parse_args()
    corpus = corpus_dir(args.corpus)

    default = REPO / "models" / "default"
    if not (default / "tokenizer.json").is_file():
        raise SystemExit(f"{default}/tokenizer.json missing: run tools/train_tokenizer.py first")
    bl = OUT / "bytelevel"
    bl.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(default / f, bl / f)
    write("bytelevel", bl, ["<|begin_of_text|>", "<|end_of_text|>"], corpus)

    spm = OUT / "spm"
    spm.mkdir(parents=True, exist_ok=True)
    train_spm(corpus).save(str(spm / "tokenizer.json"), pretty=True)
    (spm / "tokenizer_config.json").write_text(json.dumps(spm_config(), indent=2) + "\n")
    write("spm", spm, ["<s>", "</s>"], corpus)


if __name__ == "__main__":
    main()
