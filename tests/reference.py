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
    doc_id, section_id, seq, level, heading, path, content = row
    return SectionRecord(doc_id, section_id, seq, level, heading or "", tuple(path or ()), content)


COLS = "doc_id, section_id, sequence_index, heading_level, heading, heading_path, content"


def multi_call_search(conn: psycopg.Connection, table: str, vec, k: int) -> list[Hit]:
    rows = conn.execute(
        f"""SELECT doc_id, section_id, parent_section_id, sequence_index, heading_level, heading,
                   heading_path, anchor, content, token_count, embedding <=> %s AS distance
              FROM {table} ORDER BY embedding <=> %s LIMIT %s""",
        (Vector(vec), Vector(vec), k),
    ).fetchall()
    rows.sort(key=lambda r: (r[10], r[0], r[3]))
    hits = []
    for rank, r in enumerate(rows, 1):
        doc_id, sid, parent_id, seq = r[0], r[1], r[2], r[3]
        section = SectionRecord(doc_id, sid, seq, r[4], r[5] or "", tuple(r[6] or ()), r[8], parent_id, r[7], r[9])
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
