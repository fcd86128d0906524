"""The assembled context: deduplicated passages in reading order, and their prompt text.

`Retriever.assemble` returns a `Context` built by ONE statement
(``sql/templates/assemble.sql.j2``): every section appears once, with the roles
it plays for the hits (hit, parent, ancestor, neighbor, section, document) and
the best-ranked hit it serves; documents come in the order of their best hit,
and inside a document passages follow ``sequence_index``. The token budget was
already enforced in SQL over ``context_tokens``, which is exactly the cost of
the text `render_context` produces for a passage (its header line plus content),
or more for a passage that continues the passage before it (`continues`), whose
header, the same as that passage's, is not repeated: on the PostgreSQL manual's
contexts the rendered text cost up to 13% less than ``Context.tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

ROLES = ("hit", "parent", "ancestor", "neighbor", "section", "document")

#: Each role's bit in assemble.sql's ``role_bits`` column (the template reads this map).
#: The statement returns the OR of a passage's roles as one integer, not a text[]:
#: building, sending and parsing the array cost ~50 us per assembled context at k=10
#: (benchmarks/latency corpora, direct connection, interleaved).
ROLE_BITS = {role: 1 << i for i, role in enumerate(ROLES)}

_ROLES_BY_BITS = tuple(tuple(r for r in ROLES if bits & ROLE_BITS[r]) for bits in range(1 << len(ROLES)))


def roles_of(role_bits: int) -> tuple[str, ...]:
    """The role names in a ``role_bits`` value, in `ROLES` order."""
    return _ROLES_BY_BITS[role_bits]


def passage_header(doc_id: str, anchor: str | None, heading_path: Sequence[str]) -> str:
    """The separator line above a passage: heading path and source location."""
    path = " > ".join(h for h in heading_path if h) or "(preface)"
    where = f"{doc_id}#{anchor}" if anchor else doc_id
    return f"### {path} [{where}]"


@dataclass(slots=True)
class Passage:
    """One section in the assembled context.

    Not frozen, like `onetrip.retrieve.SectionRecord`: a frozen dataclass sets
    each of its 15 fields through object.__setattr__, which showed up in the
    assembled query's latency (benchmarks/latency). Treat as read-only.
    """

    doc_id: str
    section_id: str
    sequence_index: int
    heading_level: int
    heading: str
    heading_path: tuple[str, ...]
    anchor: str | None
    content: str
    token_count: int
    context_tokens: int
    roles: tuple[str, ...]
    best_rank: int          # rank of the best hit this passage serves (1 = top hit)
    doc_rank: int           # rank of the document (by its best hit)
    distance: float | None  # the passage's own distance when it is a hit, else None
    revision: int | None = None

    @property
    def is_hit(self) -> bool:
        return "hit" in self.roles

    @property
    def header(self) -> str:
        return passage_header(self.doc_id, self.anchor, self.heading_path)


@dataclass(frozen=True)
class Context:
    """What `Retriever.assemble` returns: passages in reading order within budget."""

    passages: list[Passage]
    max_tokens: int | None
    # how many hits the search found (before the budget), read from the passages' rows: 0 when the budget
    # fits no passage at all (the one statement then returns no row), as when nothing matched
    hits: int
    options: dict = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        """What the budget counted: the rendered text costs this, less the headers `render` does not repeat."""
        return sum(p.context_tokens for p in self.passages)

    def render(self) -> str:
        return render_context(self.passages)


def continues(before: Passage, p: Passage) -> bool:
    """``p`` is the next row of ``before``'s document under the same header (heading path and anchor): the next
    part of a section cut to fit the model, or, rarely, a next section under an identical header (an HTML page
    that repeats an id), whose repeated header would say nothing new either. The parts are not told apart by
    their metadata, which the assembled rows do not carry."""
    return (p.doc_id == before.doc_id and p.sequence_index == before.sequence_index + 1
            and p.anchor == before.anchor and p.heading_path == before.heading_path)


def render_context(passages: Sequence[Passage]) -> str:
    """Prompt-ready text: each passage under its heading-path separator, blank lines between.

    A part that continues the passage before it (`continues`) follows it under that passage's header: the
    repeated header had cut the section's text in two, so a sentence running across the cut was in no one
    place of the context (found by a benchmark runner's review: such quotes were scored missing). It costs
    its header's tokens less than its ``context_tokens``, which the budget counted.
    """
    out: list[str] = []
    before: Passage | None = None
    for p in passages:
        out.append(p.content if before is not None and continues(before, p) else f"{p.header}\n{p.content}")
        before = p
    return "\n\n".join(out)
