-- =============================================================================
-- onetrip: assemble.sql (PostgreSQL edition)
-- -----------------------------------------------------------------------------
-- Purpose   Context assembly in ONE statement: the top-K hits, expanded by
--           parent, section subtree,
--           deduplicated (each section once, with all its roles), cut to a
--           token budget by priority (hits, then parents/ancestors, then
--           neighbors and the rest; whole sections only, a section that does not
--           fit is skipped and the next one tried), and returned in reading
--           order: documents by their best hit, sections by sequence_index.
-- Requires  PostgreSQL 13+ (tested on 18), pgvector 0.8+; tables and indexes
--           from schema.sql (sections_embedding_hnsw, sections_doc_seq_key,
--           sections_doc_parent_idx). The Oracle Database 23ai edition is
--           oracle/assemble.sql.
-- Params    :'query_embedding'::vector  vector(384)  the query embedding
--           :'k'::integer  integer  number of hits
--           :'max_tokens'::integer  integer  token budget (context_tokens: header line + content)
--           psql: psql -v k=8 -v max_tokens=2000 -v query_embedding='[...]' -f assemble.sql
-- Settings  With iterative scans off (the server default) the HNSW scan returns
--           at most hnsw.ef_search (40) hits: SET hnsw.iterative_scan =
--           relaxed_order (as onetrip's Python API does) or hnsw.ef_search >= k.
-- Plan      On tables of a few thousand sections or more (a small table is
--           rightly read whole and sorted), the hits CTE is an Index Scan using
--           sections_embedding_hnsw (Order By embedding <=> ...). The passage keys are computed from the hits
--           (parent_sequence_index) or by following
--           parent links (sections_doc_parent_idx); each
--           distinct passage is then one Index Scan using sections_doc_seq_key.
--           The subtree's first step (the hit's split parts) reads the hit's
--           row for its part numbers, then the parts' sequence_index range;
--           PostgreSQL 18 takes that range as a filter on the hit's document
--           (sections_doc_parent_idx by doc_id alone), so it costs the
--           document's section count per hit: up to 130 index rows on the
--           PostgreSQL manual (app-psql.html), more for a book-long document.
--           The budget takes the longest prefix that fits (a running sum), then a
--           short recursive CTE adds each next section that still fits; when
--           everything fits, the recursion never runs.
-- Returns   One row per passage within budget, in reading order, with
--           role_bits, the OR of the roles it plays
--           (1 hit, 2 parent, 4 ancestor, 8 neighbor, 16 section, 32 document),
--           best_rank (the rank of the best hit it serves: a hit that is also
--           in a better hit's parent, window or subtree shows that hit's rank),
--           doc_rank, distance (the passage's own, when it is a hit; else
--           NULL) and hit_count (how many hits the search found, before the
--           budget; the same on every row).
-- onetrip   The Python API sends this statement with one change: a constant
--           HNSW LIMIT (k itself when k is a bucket of retrieve.K_BUCKETS: 4, 5,
--           8, 10, 16, 20, 50, ...; else the next such bucket, then LIMIT :k in
--           a second CTE), so a prepared statement keeps one generic plan. When
--           the bucket exceeds hnsw.ef_search (on the default 40: a k above 20
--           that is not itself a bucket) the API keeps the k nearest of the
--           bucket's rows and this file the first k the scan returns, which can
--           be other hits (see retrieve.sql); with hnsw.ef_search at least the
--           bucket both return the same rows, except where distances tie at
--           the k-th place (copies of one text): for a k that is not a bucket
--           the API keeps the tied rows first by doc_id and sequence_index;
--           this file, and the API at a k that is a bucket, keep those the
--           scan returns first.
-- =============================================================================
WITH RECURSIVE hits AS MATERIALIZED (
    SELECT s.doc_id,
           s.section_id,
           s.sequence_index,
           s.parent_sequence_index,
           s.embedding <=> :'query_embedding'::vector AS distance
      FROM sections s
     ORDER BY s.embedding <=> :'query_embedding'::vector
     LIMIT :'k'::integer
),
ranked AS (
    SELECT h.*,
           row_number() OVER (ORDER BY h.distance + 0, h.doc_id, h.sequence_index) AS hit_rank
      FROM hits h
),
hit_markers AS (
    -- a section cut into parts is stored as consecutive rows, each marked part n of m in its
    -- metadata: the hit's marker, as JSON numbers (NULL when absent or not a number)
    SELECT r.doc_id, r.sequence_index, r.hit_rank,
           CASE WHEN jsonb_typeof(h.metadata -> 'part') = 'number' THEN (h.metadata ->> 'part')::numeric END AS part,
           CASE WHEN jsonb_typeof(h.metadata -> 'parts') = 'number' THEN (h.metadata ->> 'parts')::numeric END AS parts
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
           coalesce(min(c.hit_rank) FILTER (WHERE c.priority = 0), min(c.hit_rank)) AS pick_rank,
           bit_or(c.role_bit) AS role_bits,
           min(c.distance) AS distance
      FROM candidates c
     GROUP BY c.doc_id, c.sequence_index
),
passages AS (
    -- each passage read once, through the caller's filters
    SELECT s.doc_id,
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
    WINDOW pick AS (ORDER BY k.priority, k.pick_rank, k.doc_id, k.sequence_index)
),
packed (pick_order, used) AS (
    -- greedy fill in priority order, whole sections only: the longest prefix that
    -- fits, in one step ...
    SELECT coalesce(max(p.pick_order), 0), coalesce(max(p.running), 0)
      FROM passages p
     WHERE p.running <= :'max_tokens'::integer
    UNION ALL
    -- ... then each next section that still fits; those that do not are skipped
    SELECT n.pick_order, k.used + n.context_tokens
      FROM packed k
     CROSS JOIN LATERAL (
           SELECT p.pick_order, p.context_tokens
             FROM passages p
            WHERE p.pick_order > k.pick_order
              AND p.context_tokens <= :'max_tokens'::integer - k.used
            ORDER BY p.pick_order
            LIMIT 1
           ) n
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
 WHERE p.running <= :'max_tokens'::integer  -- the prefix; packed runs only if something did not fit
    OR p.pick_order IN (SELECT k.pick_order FROM packed k)
 ORDER BY p.doc_best, p.sequence_index
