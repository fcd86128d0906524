-- =============================================================================
-- onetrip: assemble.sql (Oracle Database 23ai edition)
-- -----------------------------------------------------------------------------
-- Purpose   Context assembly in ONE statement: the top-K hits, expanded by
--           parent, section subtree,
--           deduplicated (each section once, with all its roles), cut to a
--           token budget by priority (hits, then parents/ancestors, then
--           neighbors and the rest; whole sections only, a section that does not
--           fit is skipped and the next one tried), and returned in reading
--           order: documents by their best hit, sections by sequence_index.
-- Requires  Oracle Database 23ai (23.4+; BIT_OR_AGG and the WINDOW clause are
--           21c+), tables and indexes from schema.sql (sections_embedding_hnsw,
--           sections_doc_seq_key, sections_doc_parent_idx).
--           This edition is validated by parsing (sqlglot, Oracle dialect) and
--           by running its logic translated to PostgreSQL (the tests compare it
--           with onetrip's Python API), NOT by execution on Oracle: no Oracle
--           server was available.
--           A split section's part markers are read with '$.part.numberOnly()'
--           in lax mode, which also reads a caller's own one-number array
--           ("part": [2]) as 2, where PostgreSQL reads only a plain number;
--           onetrip writes plain numbers.
-- Params    :query_embedding  CLOB    the query embedding as text, '[0.1, ...]'
--                      (384 numbers), read by TO_VECTOR(:query_embedding, 384, FLOAT32)
--                      (SQL*Plus has no VECTOR bind type; see retrieve.sql)
--           :k                NUMBER  number of hits
--           :max_tokens       NUMBER  token budget (context_tokens: header line + content)
--           SQL*Plus (a line holds at most 2,500 characters: give the vector
--           in pieces, or bind it from python-oracledb):
--                     VARIABLE query_embedding CLOB
--                     VARIABLE k NUMBER
--                     VARIABLE max_tokens NUMBER
--                     BEGIN
--                       :query_embedding := '[0.0123, -0.0456, ...'
--                                        || ' ..., 0.0789]';
--                       :k := 8;
--                       :max_tokens := 2000;
--                     END;
--                     /
--                     SET LONG 100000
--                     @assemble.sql
-- Plan      On tables of a few thousand sections or more (a small table is
--           rightly read whole and sorted), expect the hits CTE to be
--           materialized (the MATERIALIZE hint) and to use the vector index:
--           VECTOR INDEX HNSW SCAN on sections_embedding_hnsw. The passage keys are
--           computed from the hits (parent_sequence_index) or by following
--           parent links in a recursive WITH (sections_doc_parent_idx);
--           each distinct passage is then one index unique scan on
--           sections_doc_seq_key, and the passages are materialized once.
--           The budget takes the longest prefix that fits (a running sum); a
--           recursive WITH then steps through the passages after it one by one,
--           taking each that still fits: Oracle refuses aggregates in a
--           recursive member (ORA-32486; analytic functions only in its select
--           list, where they cannot keep one row) and documents no lateral
--           top-1 subquery there, so it does not jump to the next section that
--           fits as the PostgreSQL edition does (LATERAL ... LIMIT 1): one short
--           step (a join on pick_order) per passage after the prefix.
--           Confirm with DBMS_XPLAN.DISPLAY_CURSOR; rows loaded after the index
--           was built are searched exactly until it is repopulated (schema.sql).
-- Returns   One row per passage within budget, in reading order, with
--           role_bits, the OR of the roles it plays
--           (1 hit, 2 parent, 4 ancestor, 8 neighbor, 16 section, 32 document),
--           best_rank (the rank of the best hit it serves: a hit that is also
--           in a better hit's parent, window or subtree shows that hit's rank),
--           doc_rank, distance (the passage's own, when it is a hit; else
--           NULL) and hit_count (how many hits the search found, before the
--           budget; the same on every row). heading_path is a JSON
--           array; heading and content are NULL where empty (Oracle stores ''
--           as NULL). Ties in the rank orders go by doc_id in binary order
--           (NLSSORT), the same in every session.
-- =============================================================================
WITH hits AS (
    SELECT /*+ MATERIALIZE */ s.doc_id,
           s.section_id,
           s.sequence_index,
           s.parent_sequence_index,
           VECTOR_DISTANCE(s.embedding, TO_VECTOR(:query_embedding, 384, FLOAT32), COSINE) AS distance
      FROM sections s
     WHERE TO_VECTOR(:query_embedding, 384, FLOAT32) IS NOT NULL  -- a NULL embedding finds nothing (it had taken k rows, in no order)
     ORDER BY VECTOR_DISTANCE(s.embedding, TO_VECTOR(:query_embedding, 384, FLOAT32), COSINE)
     FETCH APPROX FIRST :k ROWS ONLY
),
ranked AS (
    SELECT h.*,
           row_number() OVER (ORDER BY h.distance, NLSSORT(h.doc_id, 'NLS_SORT=BINARY'), h.sequence_index) AS hit_rank
      FROM hits h
),
hit_markers AS (
    -- a section cut into parts is stored as consecutive rows, each marked part n of m in its
    -- metadata: the hit's marker, as JSON numbers (NULL when absent or not a number)
    SELECT r.doc_id, r.sequence_index, r.hit_rank,
           JSON_VALUE(h.metadata, '$.part.numberOnly()' RETURNING NUMBER) AS part,
           JSON_VALUE(h.metadata, '$.parts.numberOnly()' RETURNING NUMBER) AS parts
      FROM ranked r
      JOIN sections h
        ON h.doc_id = r.doc_id
       AND h.sequence_index = r.sequence_index
),
hit_parts AS (
    -- how many rows of the hit's section lie before and after it: only whole numbers
    -- 1 <= n <= m are onetrip's marker; any other "part" is a caller's own
    SELECT m.doc_id, m.sequence_index, m.hit_rank,
           CASE WHEN m.part >= 1 AND m.part <= m.parts AND m.parts <= 100000 AND m.part = FLOOR(m.part) AND m.parts = FLOOR(m.parts) THEN CAST(m.part - 1 AS INTEGER) ELSE 0 END AS parts_before,
           CASE WHEN m.part >= 1 AND m.part <= m.parts AND m.parts <= 100000 AND m.part = FLOOR(m.part) AND m.parts = FLOOR(m.parts) THEN CAST(m.parts - m.part AS INTEGER) ELSE 0 END AS parts_after
      FROM hit_markers m
),
subtree (doc_id, section_id, sequence_index, hit_rank, depth) AS (
    -- the hit with the other parts of its section (two sibling sections of one anchor and
    -- heading are not parts) ...
    SELECT x.doc_id, x.section_id, x.sequence_index, p.hit_rank, 0
      FROM hit_parts p
      JOIN sections x
        ON x.doc_id = p.doc_id
       AND x.sequence_index BETWEEN p.sequence_index - p.parts_before
                                AND p.sequence_index + p.parts_after
    UNION ALL
    -- ... and everything below it
    SELECT c.doc_id, c.section_id, c.sequence_index, t.hit_rank, t.depth + 1
      FROM subtree t
      JOIN sections c
        ON c.doc_id = t.doc_id
       AND c.parent_section_id = t.section_id
     WHERE t.depth < 100
),
candidates AS (
    -- one row per (passage key, hit served, role); priority orders the budget fill
    -- role bits: 1 hit, 2 parent, 4 ancestor, 8 neighbor, 16 section, 32 document
    SELECT r.doc_id, r.sequence_index, r.hit_rank, 0 AS priority, 1 AS role_bit, r.distance
      FROM ranked r
    UNION ALL
    SELECT r.doc_id, r.parent_sequence_index, r.hit_rank, 1, 2, NULL
      FROM ranked r
     WHERE r.parent_sequence_index IS NOT NULL
    UNION ALL
    SELECT t.doc_id, t.sequence_index, t.hit_rank, 3, 16, NULL
      FROM subtree t
),
passage_keys AS (
    SELECT c.doc_id,
           c.sequence_index,
           min(c.priority) AS priority,
           min(c.hit_rank) AS best_rank,
           -- a hit is ranked by its own rank even when it is also a neighbor of a better hit
           coalesce(min(CASE WHEN c.priority = 0 THEN c.hit_rank END), min(c.hit_rank)) AS pick_rank,
           BIT_OR_AGG(c.role_bit) AS role_bits,
           min(c.distance) AS distance
      FROM candidates c
     GROUP BY c.doc_id, c.sequence_index
),
passages AS (
    -- each passage read once, through the caller's filters
    SELECT /*+ MATERIALIZE */ s.doc_id,
           s.section_id,
           s.sequence_index,
           s.heading_level,
           s.heading,
           s.heading_path,
           s.anchor,
           s.content,
           s.token_count,
           s.context_tokens,
           s.revision,
           k.role_bits,
           k.best_rank,
           k.distance,
           -- a document's place in the context: its best hit
           min(k.best_rank) OVER (PARTITION BY k.doc_id) AS doc_best,
           -- priority order for the budget: hits by rank, then parents/ancestors, then the rest
           row_number() OVER pick AS pick_order,
           sum(s.context_tokens) OVER pick AS running
      FROM passage_keys k
      JOIN sections s
        ON s.doc_id = k.doc_id
       AND s.sequence_index = k.sequence_index
    WINDOW pick AS (ORDER BY k.priority, k.pick_rank, NLSSORT(k.doc_id, 'NLS_SORT=BINARY'), k.sequence_index)
),
packed (step, pick_order, used) AS (
    -- greedy fill in priority order, whole sections only: the longest prefix that
    -- fits, in one step ...
    SELECT coalesce(max(p.pick_order), 0), coalesce(max(p.pick_order), 0), coalesce(max(p.running), 0)
      FROM passages p
     WHERE p.running <= :max_tokens
    UNION ALL
    -- ... then each next section in turn: taken (pick_order) if it still fits, else
    -- skipped (pick_order NULL)
    SELECT p.pick_order,
           CASE WHEN p.context_tokens <= :max_tokens - k.used THEN p.pick_order END,
           CASE WHEN p.context_tokens <= :max_tokens - k.used THEN k.used + p.context_tokens ELSE k.used END
      FROM packed k
      JOIN passages p
        ON p.pick_order = k.step + 1
)
SELECT p.doc_id,
       p.section_id,
       p.sequence_index,
       p.heading_level,
       p.heading,
       p.heading_path,
       p.anchor,
       p.content,
       p.token_count,
       p.context_tokens,
       p.revision,
       p.role_bits,
       p.best_rank,
       dense_rank() OVER (ORDER BY p.doc_best) AS doc_rank,
       p.distance,
       (SELECT count(*) FROM hits) AS hit_count
  FROM passages p
 WHERE p.running <= :max_tokens  -- the prefix, then what packed took after it
    OR p.pick_order IN (SELECT k.pick_order FROM packed k)
 ORDER BY p.doc_best, p.sequence_index;
