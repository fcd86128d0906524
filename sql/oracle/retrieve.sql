-- =============================================================================
-- onetrip: retrieve.sql (Oracle Database 23ai edition)
-- -----------------------------------------------------------------------------
-- Purpose   The one-round-trip retrieval query: the top-K sections nearest to a
--           query embedding, each with its parent section and its previous and
--           next sections in document order. ONE statement, ONE row per hit.
-- Requires  Oracle Database 23ai (23.4+), tables and vector index from schema.sql.
--           This edition is validated by parsing (sqlglot, Oracle dialect) and
--           golden files, NOT by execution: no Oracle server was available.
-- Params    :query_embedding  VECTOR(384, FLOAT32)  the query embedding
--           :k                NUMBER                 number of hits (top-K)
-- Plan      Expect the hits CTE to be materialized (the MATERIALIZE hint) and
--           to use the vector index: VECTOR INDEX HNSW SCAN on sections_embedding_hnsw,
--           then index unique scans on sections_pkey / sections_doc_seq_key.
-- Returns   One row per hit, ordered by distance (ties: doc_id, sequence_index):
--           the hit's own columns, then parent_*, prev_* and next_* columns that
--           are NULL where there is no such section (a root, a document's first
--           or last section).
-- =============================================================================
WITH hits AS (
    SELECT /*+ MATERIALIZE */ s.doc_id,
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
           VECTOR_DISTANCE(s.embedding, :query_embedding, COSINE) AS distance
      FROM sections s
     ORDER BY VECTOR_DISTANCE(s.embedding, :query_embedding, COSINE)
     FETCH APPROX FIRST :k ROWS ONLY
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
