-- =============================================================================
-- onetrip: assemble.sql (PostgreSQL edition)
-- -----------------------------------------------------------------------------
-- Purpose   Context assembly in ONE statement: the top-K hits, expanded by
--           parent, neighbors (+/-N, any scope),
--           deduplicated (each section once, with all its roles), cut to a
--           token budget by priority (hits, then parents/ancestors, then
--           neighbors and the rest; whole sections only, a section that does not
--           fit is skipped and the next one tried), and returned in reading
--           order: documents by their best hit, sections by sequence_index.
-- Requires  PostgreSQL 13+ (tested on 18), pgvector 0.8+; tables and indexes
--           from schema.sql (sections_embedding_hnsw, sections_doc_seq_key,
--           sections_doc_parent_idx). PostgreSQL only: there is no Oracle edition
--           of this query yet.
-- Params    :'query_embedding'::vector  vector(384)  the query embedding
--           :k  integer  number of hits
--           :neighbors  integer  neighbor window N (sections before and after)
--           :max_tokens  integer  token budget (context_tokens: header line + content)
-- Plan      The hits CTE is an Index Scan using sections_embedding_hnsw (Order By
--           embedding <=> ...); every expansion is an index lookup by doc_id
--           (sections_pkey, sections_doc_seq_key, sections_doc_parent_idx);
--           the budget is a short recursive CTE over the candidate rows only.
-- Returns   One row per passage within budget, in reading order, with roles
--           (text[]), best_rank (best hit it serves) and doc_rank.
-- =============================================================================
WITH RECURSIVE hits AS MATERIALIZED (
    SELECT s.doc_id,
           s.section_id,
           s.parent_section_id,
           s.sequence_index,
           s.heading_level,
           s.heading_path,
           s.anchor,
           s.context_tokens,
           s.embedding <=> :'query_embedding'::vector AS distance
      FROM sections s
     ORDER BY s.embedding <=> :'query_embedding'::vector
     LIMIT :k
),
ranked AS (
    SELECT h.*,
           row_number() OVER (ORDER BY h.distance, h.doc_id, h.sequence_index) AS hit_rank
      FROM hits h
),
candidates AS (
    -- every row carries what ordering and the budget need, so no second lookup per passage
    SELECT r.doc_id, r.section_id, r.sequence_index, r.context_tokens, 'hit' AS role, r.hit_rank, 0 AS priority
      FROM ranked r
    UNION ALL
    SELECT p.doc_id, p.section_id, p.sequence_index, p.context_tokens, 'parent', r.hit_rank, 1
      FROM ranked r
      JOIN sections p
        ON p.doc_id = r.doc_id
       AND p.section_id = r.parent_section_id
    UNION ALL
    SELECT n.doc_id, n.section_id, n.sequence_index, n.context_tokens, 'neighbor', r.hit_rank, 2
      FROM ranked r
      JOIN sections n
        ON n.doc_id = r.doc_id
       AND n.sequence_index BETWEEN r.sequence_index - :neighbors
                                AND r.sequence_index + :neighbors
       AND n.sequence_index <> r.sequence_index
),
passages AS (
    SELECT c.doc_id,
           c.section_id,
           c.sequence_index,
           c.context_tokens,
           min(c.priority) AS priority,
           min(c.hit_rank) AS best_rank,
           -- a hit is ranked by its own rank even when it is also a neighbor of a better hit
           coalesce(min(c.hit_rank) FILTER (WHERE c.role = 'hit'), min(c.hit_rank)) AS pick_rank,
           array_agg(DISTINCT c.role) AS roles
      FROM candidates c
     GROUP BY c.doc_id, c.section_id, c.sequence_index, c.context_tokens
),
ordered AS (
    SELECT p.doc_id,
           p.section_id,
           p.priority,
           p.best_rank,
           p.roles,
           p.sequence_index,
           p.context_tokens,
           min(p.best_rank) OVER (PARTITION BY p.doc_id) AS doc_best,
           row_number() OVER (ORDER BY p.priority, p.pick_rank, p.doc_id, p.sequence_index) AS pick_order
      FROM passages p
),
costs AS MATERIALIZED (
    -- the passages' token costs as one array in pick order: the fill below steps through it
    SELECT array_agg(o.context_tokens ORDER BY o.pick_order) AS tokens
      FROM ordered o
),
packed (pick_order, used, taken) AS (
    -- greedy fill in priority order: take a section if it fits, else skip it
    SELECT CAST(0 AS bigint), CAST(0 AS bigint), false
    UNION ALL
    SELECT k.pick_order + 1,
           CASE WHEN k.used + c.tokens[k.pick_order + 1] <= :max_tokens
                THEN k.used + c.tokens[k.pick_order + 1] ELSE k.used END,
           k.used + c.tokens[k.pick_order + 1] <= :max_tokens
      FROM packed k
     CROSS JOIN costs c
     WHERE k.pick_order < cardinality(c.tokens)
)
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
       o.roles,
       o.best_rank,
       dense_rank() OVER (ORDER BY o.doc_best, o.doc_id) AS doc_rank,
       h.distance,
       (SELECT count(*) FROM hits) AS hit_count
  FROM ordered o
  JOIN packed k
    ON k.pick_order = o.pick_order
   AND k.taken
  JOIN sections s
    ON s.doc_id = o.doc_id
   AND s.section_id = o.section_id
  LEFT JOIN ranked h
    ON h.doc_id = o.doc_id
   AND h.section_id = o.section_id
 ORDER BY o.doc_best, o.doc_id, s.sequence_index
