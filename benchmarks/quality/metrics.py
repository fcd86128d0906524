"""Scoring for the evidence-completeness question sets (pure functions, no database).

Definitions (see /work/shared/eval/README.md):

* Evidence coverage of a question: the fraction of its evidence quotes that occur
  in the assembled context text after whitespace normalization of both sides
  (every run of whitespace becomes one space, ends stripped). Questions without
  evidence (``needs == "none"``) have no coverage; means are over answerable ones,
  i.e. those that cite evidence, whatever their ``needs`` says (`question_warnings`
  names the records where the two disagree).
* Section recall: the fraction of the question's distinct cited
  ``(page, section_id)`` pairs present among the returned passages. A passage
  covers its own anchor plus the anchors of the tiny sections merged into it
  (``metadata["merged"]``); a split part carries its section's anchor; a window
  covers the anchors of every section its text span overlaps.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

_WS = re.compile(r"\s+")
T = TypeVar("T")
NEEDS = ("parent", "neighbor", "section", "multi", "none")  # the labels of /work/shared/eval/README.md


def normalize_ws(text: str) -> str:
    """Collapse every whitespace run (spaces, tabs, newlines, NBSP...) to one space; strip the ends."""
    return _WS.sub(" ", text).strip()


@dataclass(frozen=True)
class Evidence:
    page: str
    section_id: str
    quote: str


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    evidence: tuple[Evidence, ...]
    needs: str
    why: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    where: str = field(default="", compare=False)  # "FILE:LINE" it was read from, for messages

    @property
    def answerable(self) -> bool:
        """It cites evidence, so it has a coverage. A ``needs: none`` record with quotes had been a `none`
        question whose per-question row still showed its coverage, left out of every mean."""
        return bool(self.evidence)

    @property
    def cited_pairs(self) -> tuple[tuple[str, str], ...]:
        """Distinct (page, section_id) pairs, in citation order."""
        seen: dict[tuple[str, str], None] = {}
        for e in self.evidence:
            seen.setdefault((e.page, e.section_id), None)
        return tuple(seen)


def _read_records(path: str | Path, record: Callable[[dict[str, Any], str], T]) -> list[T]:
    """``record`` of each line of a JSONL question file (blank lines and lines starting with '#' are skipped),
    given the object and its "FILE:LINE".

    A line that is not a JSON object, or that ``record`` refuses (KeyError, TypeError), is a ValueError
    naming the file and the line: the benchmarks refuse it as a bad argument (exit 2), not with a traceback.
    A leading byte-order mark is dropped (it had failed line 1), and lines end at "\n" alone (read_text has
    made "\r\n" and "\r" "\n"): str.splitlines also split at U+2028, U+2029 and U+0085, which a JSON string
    may hold raw (json.dumps(ensure_ascii=False) writes them so), cutting such a record in two.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8-sig").split("\n")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e})") from e
    out: list[T] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):  # a list or a string had been an AttributeError naming no line
                raise TypeError(f"a JSON {type(obj).__name__}, not an object")
            out.append(record(obj, f"{path}:{n}"))
        except (KeyError, TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}:{n}: not a question record ({type(e).__name__}: {e})") from e
    return out


def _question(obj: dict[str, Any], where: str = "") -> Question:
    ev = tuple(Evidence(e["page"], e["section_id"], e["quote"]) for e in obj.get("evidence") or ())
    bad = [e.quote for e in ev if not isinstance(e.quote, str) or not isinstance(e.page, str)]
    if bad or not isinstance(obj["question"], str):  # "quote": null failed only after ingest and windows
        raise TypeError(f"question, page and quote must be strings, got {(bad or [obj['question']])[0]!r}")
    known = {"id", "question", "evidence", "needs", "why"}
    return Question(str(obj["id"]), obj["question"], ev, obj.get("needs", ""), obj.get("why", ""),
                    {k: v for k, v in obj.items() if k not in known}, where)


def _question_text(obj: dict[str, Any], where: str = "") -> str:
    if not isinstance(obj["question"], str):
        raise TypeError(f"question must be a string, got {obj['question']!r}")
    return obj["question"]


def load_questions(path: str | Path) -> list[Question]:
    """Read a JSONL question file (blank lines and lines starting with '#' are skipped)."""
    return _read_records(path, _question)


def question_texts(path: str | Path) -> list[str]:
    """The questions of a JSONL file whose records need only a "question" string (the latency benchmarks'
    queries), read as `load_questions` reads: '#' lines skipped, a bad line a ValueError naming FILE:LINE."""
    return _read_records(path, _question_text)


def load_question_files(paths: Sequence[str | Path]) -> list[Question]:
    """Several question files as one set; an id used twice is an error naming both lines, not a silent
    overwrite (it had named the file alone, twice when both were in one file)."""
    out: list[Question] = []
    seen: dict[str, str] = {}
    for path in paths:
        for q in load_questions(path):
            if q.id in seen:
                raise ValueError(f"{q.where}: question id {q.id!r} already read at {seen[q.id]}")
            seen[q.id] = q.where
            out.append(q)
    return out


def question_warnings(questions: Sequence[Question]) -> list[str]:
    """A line for each question whose ``needs`` is none of `NEEDS` (or missing), or disagrees with its evidence
    (``none`` with quotes, another label without). Warned, not refused: another set may use other labels, and
    `Question.answerable` (it cites evidence) decides how it is scored; these had been taken as `none` silently.
    """
    out = []
    for q in questions:
        at = f"{q.where + ': ' if q.where else ''}question {q.id!r}"
        scored = "scored as answerable (it cites evidence)" if q.evidence else "scored as `none` (no evidence)"
        if q.needs not in NEEDS:
            what = "has no needs" if q.needs in ("", None) else f"has needs {q.needs!r}"
            out.append(f"{at} {what}, not one of {', '.join(NEEDS)}; {scored}")
        elif q.needs == "none" and q.evidence:
            out.append(f"{at} has needs 'none' but {len(q.evidence)} evidence quote(s); {scored}")
        elif q.needs != "none" and not q.evidence:
            out.append(f"{at} has needs {q.needs!r} but no evidence; {scored}")
    return out


def quotes_found(quotes: Sequence[str], context_text: str) -> list[bool]:
    """For each quote: is it in the context, both sides whitespace-normalized?"""
    hay = normalize_ws(context_text)
    return [bool(normalize_ws(q)) and normalize_ws(q) in hay for q in quotes]


def coverage(quotes: Sequence[str], context_text: str) -> float | None:
    """Fraction of quotes present in the context; None when there are no quotes.

    Each listed quote counts, so a text listed twice counts twice, as in `run`'s per-question figures
    (no question of the three sets lists a quote twice).
    """
    return coverage_of(quotes_found(quotes, context_text))


def coverage_of(found: Sequence[bool]) -> float | None:
    """The fraction of quotes found (`quotes_found`'s flags); None when there are none."""
    return sum(found) / len(found) if found else None


def passage_anchors(anchor: str | None, metadata: Mapping[str, Any] | str | None) -> tuple[str, ...]:
    """Anchors a stored row holds text of: its own, those merged into it, and (windows) ``anchors``.

    Same rule as `onetrip.sections.section_anchors`, read from a row's columns. ``metadata``
    may also be JSON text: tables written before `onetrip.store` stored a jsonb object hold a jsonb
    *string* holding the JSON document (double-encoded), which psycopg hands back as str.
    """
    meta: Any = metadata or {}
    if isinstance(meta, (str, bytes)):
        meta = json.loads(meta)
        if isinstance(meta, str):  # tolerate one more level of encoding
            meta = json.loads(meta)
    if not isinstance(meta, Mapping):
        meta = {}
    merged = [m.get("anchor") for m in meta.get("merged", []) if isinstance(m, Mapping)]
    listed = list(meta.get("anchors", []))
    out: dict[str, None] = {}
    for a in [anchor, *merged, *listed]:
        if a:
            out.setdefault(a, None)
    return tuple(out)


def covered_pairs(passages: Iterable[tuple[str, str]],
                  anchors_of: Mapping[tuple[str, str], Sequence[str]]) -> set[tuple[str, str]]:
    """(doc_id, anchor) pairs covered by returned (doc_id, section_id) passages."""
    out: set[tuple[str, str]] = set()
    for doc_id, section_id in passages:
        for a in anchors_of.get((doc_id, section_id), ()):
            out.add((doc_id, a))
    return out


def section_recall(cited: Sequence[tuple[str, str]], covered: set[tuple[str, str]]) -> float | None:
    """Fraction of distinct cited (page, section_id) pairs in ``covered``; None if nothing is cited."""
    pairs = list(dict.fromkeys(cited))
    if not pairs:
        return None
    return sum(p in covered for p in pairs) / len(pairs)


def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the non-None values (None when there are none)."""
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None


def median(values: Iterable[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else None


def distribution(values: Iterable[float | None]) -> dict[str, float | int | None]:
    """min / median / max / mean / n of the non-None values."""
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return {"n": 0, "min": None, "median": None, "max": None, "mean": None}
    return {"n": len(xs), "min": xs[0], "median": statistics.median(xs), "max": xs[-1],
            "mean": sum(xs) / len(xs)}


def paired_record(a: Sequence[float | None], b: Sequence[float | None], eps: float = 1e-9) -> dict[str, int]:
    """Per-question wins/ties/losses of a over b (None entries skipped)."""
    w = t = l = 0
    for x, y in zip(a, b):
        if x is None or y is None:
            continue
        if x > y + eps:
            w += 1
        elif y > x + eps:
            l += 1
        else:
            t += 1
    return {"wins": w, "ties": t, "losses": l}
