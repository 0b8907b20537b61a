"""The book corpus and its fixed train/validation split.

Books are split by id, never inside a book: sorted numerically, every twelfth
book (positions 11, 23, 35, 47) is validation, the other 44 are training. The
rule is fixed here so that the tokenizer, the trainer and `specpipe eval` all
agree on which text the model has seen.
"""
from __future__ import annotations

import os
from pathlib import Path

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "pg"


def corpus_dir(arg: str | None = None) -> Path:
    """The corpus folder: the argument, $SPECPIPE_CORPUS, or ../shared/corpus/pg."""
    path = Path(arg or os.environ.get("SPECPIPE_CORPUS", DEFAULT_CORPUS))
    if not path.is_dir():
        raise SystemExit(f"corpus folder {path} does not exist (pass --corpus DIR)")
    return path


def book_ids(folder: Path) -> list[int]:
    ids = sorted(int(p.stem) for p in folder.glob("*.txt") if p.stem.isdigit())
    if not ids:
        raise SystemExit(f"no <id>.txt books in {folder}")
    return ids


def split_books(folder: Path) -> tuple[list[Path], list[Path]]:
    """(train, validation) book paths."""
    ids = book_ids(folder)
    train = [folder / f"{i}.txt" for k, i in enumerate(ids) if k % 12 != 11]
    valid = [folder / f"{i}.txt" for k, i in enumerate(ids) if k % 12 == 11]
    return train, valid


if __name__ == "__main__":
    import sys

    tr, va = split_books(corpus_dir(sys.argv[1] if len(sys.argv) > 1 else None))
    print(f"train: {len(tr)} books, validation: {len(va)} books")
    print("validation:", " ".join(p.stem for p in va))
