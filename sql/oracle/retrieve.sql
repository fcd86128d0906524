-- =============================================================================
-- onetrip: retrieve.sql (Oracle Database 23ai edition)
-- -----------------------------------------------------------------------------
-- Purpose   The one-round-trip retrieval query: the top-K sections nearest to a
--           query embedding, each with its parent section and its previous and
--           next sections in document order. ONE statement; each section
--           comes back once, however many hits it serves (see Returns).
-- Requires  Oracle Database 23ai (23.4+), tables and vector index from schema.sql.
--           This edition is validated by parsing (sqlglot, Oracle dialect) and
--           golden files, NOT by execution: no Oracle server was available.
-- Params    :query_embedding  VECTOR(384, FLOAT32)  the query embedding
--           :k                NUMBER                 number of hits (top-K)
-- Plan      Expect the hits CTE to be materialized (the MATERIALIZE hint) and
--           to use the vector index: VECTOR INDEX HNSW SCAN on sections_embedding_hnsw,
--           then index unique scans on sections_doc_seq_key / sections_pkey,
--           one per distinct context section.
-- Returns   Each section ONCE. First the hits: hit_rank 1..k, ordered by
--           distance (ties: doc_id, sequence_index).
--           Then the context rows (hit_rank and distance NULL), ordered by
--           doc_id, sequence_index: every hit's parent and previous/next section
--           in document order that is not itself a hit. A hit's parent is the
--           row (hit or context) with section_id = its parent_section_id; its
--           neighbors are the rows of the same doc_id at sequence_index - 1 and
--           + 1. No such row: a root, a document boundary (or, with filters, a
--           section the caller may not see). A section that is the neighbor or
--           parent of several hits is read and sent once.
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
),
neighbor_keys AS (
    SELECT h.doc_id, h.sequence_index - 1 AS sequence_index
      FROM hits h
    UNION
    SELECT h.doc_id, h.sequence_index + 1
      FROM hits h
    MINUS
    SELECT h.doc_id, h.sequence_index
      FROM hits h
),
parent_keys AS (
    SELECT h.doc_id, h.parent_section_id AS section_id
      FROM hits h
     WHERE h.parent_section_id IS NOT NULL
    MINUS
    SELECT h.doc_id, h.section_id
      FROM hits h
),
context AS (
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
           s.revision
      FROM neighbor_keys w
      JOIN sections s
        ON s.doc_id = w.doc_id
       AND s.sequence_index = w.sequence_index
    UNION ALL
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
           s.revision
      FROM parent_keys w
      JOIN sections s
        ON s.doc_id = w.doc_id
       AND s.section_id = w.section_id
     WHERE NOT EXISTS (SELECT 1
                         FROM neighbor_keys n
                        WHERE n.doc_id = s.doc_id
                          AND n.sequence_index = s.sequence_index)
)
SELECT row_number() OVER (ORDER BY h.distance, h.doc_id, h.sequence_index) AS hit_rank,
       h.distance,
       h.doc_id,
       h.section_id,
       h.parent_section_id,
       h.sequence_index,
       h.heading_level,
       h.heading,
       h.heading_path,
       h.anchor,
       h.content,
       h.token_count,
       h.revision
  FROM hits h
UNION ALL
SELECT NULL,
       NULL,
       c.doc_id,
       c.section_id,
       c.parent_section_id,
       c.sequence_index,
       c.heading_level,
       c.heading,
       c.heading_path,
       c.anchor,
       c.content,
       c.token_count,
       c.revision
  FROM context c
 ORDER BY hit_rank, doc_id, sequence_index
