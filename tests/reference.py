"""A straightforward multi-call retrieval, the way frameworks do it, as a test oracle.

Search first, then fetch each hit's parent, then its neighbors: 1 + K + 2K
statements. Written independently of onetrip's template so that equality with
the single statement means something.
"""

from __future__ import annotations

import psycopg
from pgvector import Vector

from onetrip.retrieve import Hit, SectionRecord


def _record(row: tuple) -> SectionRecord:
    doc_id, section_id, seq, level, heading, path, content, parent_id, anchor, tokens, revision = row
    return SectionRecord(doc_id, section_id, seq, level, heading or "", tuple(path or ()), content, parent_id, anchor,
                         tokens, revision)


COLS = ("doc_id, section_id, sequence_index, heading_level, heading, heading_path, content, "
        "parent_section_id, anchor, token_count, revision")


def multi_call_search(conn: psycopg.Connection, table: str, vec, k: int, vector_type: str = "vector") -> list[Hit]:
    rows = conn.execute(
        f"""SELECT doc_id, section_id, parent_section_id, sequence_index, heading_level, heading,
                   heading_path, anchor, content, token_count, embedding <=> %s::{vector_type} AS distance, revision
              FROM {table} ORDER BY embedding <=> %s::{vector_type} LIMIT %s""",
        (Vector(vec), Vector(vec), k),
    ).fetchall()
    rows.sort(key=lambda r: (r[10], r[0], r[3]))
    hits = []
    for rank, r in enumerate(rows, 1):
        doc_id, sid, parent_id, seq = r[0], r[1], r[2], r[3]
        section = SectionRecord(doc_id, sid, seq, r[4], r[5] or "", tuple(r[6] or ()), r[8], parent_id, r[7], r[9],
                                r[11])
        parent = None
        if parent_id is not None:
            p = conn.execute(f"SELECT {COLS} FROM {table} WHERE doc_id = %s AND section_id = %s",
                             (doc_id, parent_id)).fetchone()
            parent = _record(p) if p else None
        prev = conn.execute(f"SELECT {COLS} FROM {table} WHERE doc_id = %s AND sequence_index = %s",
                            (doc_id, seq - 1)).fetchone()
        nxt = conn.execute(f"SELECT {COLS} FROM {table} WHERE doc_id = %s AND sequence_index = %s",
                           (doc_id, seq + 1)).fetchone()
        hits.append(Hit(rank, float(r[10]), section, parent,
                        _record(prev) if prev else None, _record(nxt) if nxt else None))
    return hits


def reference_assemble(conn: psycopg.Connection, hits: list[Hit], exp, max_tokens: int | None) -> list[tuple]:
    """Context assembly done the slow, obvious way in Python, from whole-document reads.

    Returns (doc_id, section_id, roles, best_rank) in the expected reading order.
    """
    docs: dict[str, list[dict]] = {}
    doc_tokens: dict[str, int] = {}

    def parts_of(secs: list[dict], one: dict) -> list[dict]:
        """A section's split parts, itself included: the consecutive rows marked part 1..m (metadata), from the
        first part on; not other sections of the same anchor and heading (two id-less sibling containers)."""
        first = one["seq"] - one["part"] + 1
        return [s for s in secs if first <= s["seq"] < first + one["parts"]]
    for h in hits:
        d = h.section.doc_id
        if d not in docs:
            rows = conn.execute(
                """SELECT section_id, parent_section_id, sequence_index, heading_level, heading_path, anchor,
                          context_tokens, coalesce((metadata ->> 'part')::int, 1), coalesce((metadata ->> 'parts')::int, 1)
                     FROM sections WHERE doc_id = %s ORDER BY sequence_index""", (d,)).fetchall()
            docs[d] = [dict(zip(("sid", "parent", "seq", "level", "path", "anchor", "ctx", "part", "parts"), r))
                       for r in rows]
            doc_tokens[d] = conn.execute("SELECT token_count FROM documents WHERE doc_id = %s", (d,)).fetchone()[0]
    cand: dict[tuple[str, str], dict] = {}

    def add(doc: str, sid: str, role: str, rank: int, prio: int) -> None:
        c = cand.setdefault((doc, sid), {"roles": set(), "rank": rank, "prio": prio, "own": None})
        c["roles"].add(role)
        if role == "hit":
            c["own"] = rank
        c["rank"] = min(c["rank"], rank)
        c["prio"] = min(c["prio"], prio)

    for h in hits:
        d, secs = h.section.doc_id, docs[h.section.doc_id]
        by_id = {s["sid"]: s for s in secs}
        me = by_id[h.section.section_id]
        add(d, me["sid"], "hit", h.rank, 0)
        chain = []
        cur = me
        while cur["parent"] is not None and cur["parent"] in by_id:
            cur = by_id[cur["parent"]]
            chain.append(cur)
        if exp.parent and chain:
            add(d, chain[0]["sid"], "parent", h.rank, 1)
        if exp.ancestors:
            for a in chain[1:] if exp.parent else chain:
                add(d, a["sid"], "ancestor", h.rank, 1)
        if exp.neighbors:
            scope = None  # scope "parent": the parent, its split parts and everything below it, by parent links
            if exp.neighbor_scope == "parent" and chain:
                scope = {s["sid"] for s in parts_of(secs, chain[0])}
                frontier = set(scope)
                while frontier:
                    frontier = {s["sid"] for s in secs if s["parent"] in frontier and s["sid"] not in scope}
                    scope |= frontier
            for s in secs:
                if s["seq"] != me["seq"] and abs(s["seq"] - me["seq"]) <= exp.neighbors:
                    if scope is not None and s["sid"] not in scope:
                        continue
                    add(d, s["sid"], "neighbor", h.rank, 2)
        if exp.section:
            roots = parts_of(secs, me)
            frontier = [r["sid"] for r in roots]
            seen = set(frontier)
            while frontier:
                kids = [s["sid"] for s in secs if s["parent"] in frontier and s["sid"] not in seen]
                seen.update(kids)
                frontier = kids
            for sid in seen:
                add(d, sid, "section", h.rank, 3)
        if exp.document and doc_tokens[d] <= exp.document_max_tokens:
            for s in secs:
                add(d, s["sid"], "document", h.rank, 3)

    seq = {(d, s["sid"]): s["seq"] for d, secs in docs.items() for s in secs}
    ctx = {(d, s["sid"]): s["ctx"] for d, secs in docs.items() for s in secs}
    def pick_rank(key):
        c = cand[key]
        return c["own"] if c["own"] is not None else c["rank"]

    order = sorted(cand, key=lambda key: (cand[key]["prio"], pick_rank(key), key[0], seq[key]))
    taken, used = [], 0
    for key in order:
        if max_tokens is None or used + ctx[key] <= max_tokens:
            taken.append(key)
            used += ctx[key]
    doc_best = {}
    for key in cand:
        doc_best[key[0]] = min(doc_best.get(key[0], 10**9), cand[key]["rank"])
    taken.sort(key=lambda key: (doc_best[key[0]], key[0], seq[key]))
    return [(d, sid, tuple(sorted(cand[(d, sid)]["roles"])), cand[(d, sid)]["rank"]) for d, sid in taken]
