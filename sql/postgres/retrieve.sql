-- =============================================================================
-- onetrip: retrieve.sql (PostgreSQL edition)
-- -----------------------------------------------------------------------------
-- Purpose   The one-round-trip retrieval query: the top-K sections nearest to a
--           query embedding, each with its parent section and its previous and
--           next sections in document order. ONE statement, ONE row per hit.
-- Requires  PostgreSQL 13+ (tested on 18), pgvector 0.8+.
--           Tables and indexes from schema.sql: sections with the HNSW
--           index sections_embedding_hnsw and the unique index sections_doc_seq_key.
-- Params    :'query_embedding'::vector  vector(384)   the query embedding, e.g. '[0.1, ...]'
--           :k  integer       number of hits (top-K)
--           psql: psql -v k=5 -v query_embedding='[...]' -f retrieve.sql
-- Settings  hnsw.ef_search sets the HNSW candidate list (default 40). onetrip's
--           Python API runs with the same server settings as this file does;
--           raise it with SET hnsw.ef_search = 100 when k is large.
-- Plan      Expect the hits CTE to use the index, not a Sort over a Seq Scan:
--             CTE Scan on hits h
--               CTE hits
--                 ->  Limit
--                       ->  Index Scan using sections_embedding_hnsw on sections s
--                             Order By: (embedding <=> '...'::vector)
--           followed by three index lookups per hit (sections_pkey for the
--           parent, sections_doc_seq_key for prev/next). Ordering by
--           1 - (embedding <=> q) instead of the bare operator loses the index.
-- Returns   One row per hit, ordered by distance (ties: doc_id, sequence_index):
--           the hit's own columns, then parent_*, prev_* and next_* columns that
--           are NULL where there is no such section (a root, a document's first
--           or last section).
-- =============================================================================
WITH hits AS MATERIALIZED (
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
           s.embedding <=> :'query_embedding'::vector AS distance
      FROM sections s
     ORDER BY s.embedding <=> :'query_embedding'::vector
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
 ORDER BY h.distance, h.doc_id, h.sequence_index
