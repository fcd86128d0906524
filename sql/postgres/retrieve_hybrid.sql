-- =============================================================================
-- onetrip: retrieve_hybrid.sql (PostgreSQL edition)
-- -----------------------------------------------------------------------------
-- Purpose   Hybrid retrieval in one round trip: the top-N sections by vector
--           distance (HNSW) and the top-N by full-text rank (GIN, tsv column and
--           exact technical terms), fused by Reciprocal Rank Fusion, then the
--           top-K fused hits, each with its parent and previous/next sections.
--           ONE statement, ONE row per hit.
-- Requires  PostgreSQL 13+ (tested on 18), pgvector 0.8+.
--           Tables and indexes from schema.sql: sections with the HNSW
--           index sections_embedding_hnsw and the unique index sections_doc_seq_key.
-- Params    :'query_embedding'::vector  vector(384)   the query embedding, e.g. '[0.1, ...]'
--           :k  integer       number of hits (top-K)
--           :'query_text'  text  the query as typed (websearch syntax)
--           :'query_terms'::text[]  text[]  exact technical terms of the query, lower-case,
--                      e.g. '{max_connections}' ('{}' if none)
--           :candidates  integer  candidates per list (N, e.g. 50)
--           :rrf_k  integer  RRF constant (60)
--           :dense_weight, :lexical_weight, :term_weight  float  weights (1.0)
-- Settings  hnsw.ef_search sets the HNSW candidate list (default 40). onetrip's
--           Python API runs with the same server settings as this file does;
--           raise it with SET hnsw.ef_search = 100 when k is large.
-- Plan      dense: Index Scan using sections_embedding_hnsw (Order By embedding <=> ...);
--           lexical: Bitmap Heap Scan over BitmapOr of sections_tsv_gin and
--           sections_terms_gin, then a top-N sort by rank; then index lookups.
--           Oracle: hybrid mode is PostgreSQL-only (no Oracle Text edition).
-- Returns   One row per hit, ordered by fused score (then distance) (ties: doc_id, sequence_index):
--           the hit's own columns, then parent_*, prev_* and next_* columns that
--           are NULL where there is no such section (a root, a document's first
--           or last section).
-- =============================================================================
WITH dense AS MATERIALIZED (
    SELECT s.doc_id,
           s.section_id,
           s.embedding <=> :'query_embedding'::vector AS distance
      FROM sections s
     ORDER BY s.embedding <=> :'query_embedding'::vector
     LIMIT :candidates
),
lexical AS MATERIALIZED (
    SELECT s.doc_id,
           s.section_id,
           ts_rank_cd(s.tsv, q.query)
             + :term_weight * (s.terms && :'query_terms'::text[])::int AS lex_score
      FROM sections s,
           websearch_to_tsquery('english'::regconfig, :'query_text') q (query)
     WHERE (s.tsv @@ q.query OR s.terms && :'query_terms'::text[])
     ORDER BY lex_score DESC, s.doc_id, s.section_id
     LIMIT :candidates
),
fused AS (
    SELECT c.doc_id,
           c.section_id,
           sum(c.weight / (:rrf_k + c.rank)) AS score
      FROM (
            SELECT d.doc_id, d.section_id, :dense_weight AS weight,
                   row_number() OVER (ORDER BY d.distance, d.doc_id, d.section_id) AS rank
              FROM dense d
            UNION ALL
            SELECT l.doc_id, l.section_id, :lexical_weight AS weight,
                   row_number() OVER (ORDER BY l.lex_score DESC, l.doc_id, l.section_id) AS rank
              FROM lexical l
           ) c
     GROUP BY c.doc_id, c.section_id
),
hits AS MATERIALIZED (
    SELECT s.doc_id,
           s.section_id,
           s.parent_section_id,
           s.sequence_index,
           s.heading_level,
           s.heading,
           s.heading_path,
           s.anchor,
           s.content,
           s.token_count,
           s.revision,
           s.embedding <=> :'query_embedding'::vector AS distance,
           f.score
      FROM fused f
      JOIN sections s
        ON s.doc_id = f.doc_id
       AND s.section_id = f.section_id
     ORDER BY f.score DESC, distance, s.doc_id, s.sequence_index
     LIMIT :k
)
SELECT h.doc_id,
       h.section_id,
       h.parent_section_id,
       h.sequence_index,
       h.heading_level,
       h.heading,
       h.heading_path,
       h.anchor,
       h.content,
       h.token_count,
       h.revision,
       h.distance,
       h.score,
       p.section_id     AS parent_id,
       p.sequence_index AS parent_sequence_index,
       p.heading_level  AS parent_heading_level,
       p.heading        AS parent_heading,
       p.heading_path   AS parent_heading_path,
       p.content        AS parent_content,
       pv.section_id     AS prev_id,
       pv.sequence_index AS prev_sequence_index,
       pv.heading_level  AS prev_heading_level,
       pv.heading        AS prev_heading,
       pv.heading_path   AS prev_heading_path,
       pv.content        AS prev_content,
       nx.section_id     AS next_id,
       nx.sequence_index AS next_sequence_index,
       nx.heading_level  AS next_heading_level,
       nx.heading        AS next_heading,
       nx.heading_path   AS next_heading_path,
       nx.content        AS next_content
  FROM hits h
  LEFT JOIN sections p
         ON p.doc_id = h.doc_id
        AND p.section_id = h.parent_section_id
  LEFT JOIN sections pv
         ON pv.doc_id = h.doc_id
        AND pv.sequence_index = h.sequence_index - 1
  LEFT JOIN sections nx
         ON nx.doc_id = h.doc_id
        AND nx.sequence_index = h.sequence_index + 1
 ORDER BY h.score DESC, h.distance, h.doc_id, h.sequence_index
