-- =============================================================================
-- onetrip: retrieve_macro.sql (Oracle Database 23ai edition)
-- -----------------------------------------------------------------------------
-- Purpose   A table SQL macro around retrieve.sql, Oracle's natural equivalent
--           of a set-returning function: the query text is expanded into the
--           caller's statement at parse time, so the optimizer sees (and can
--           use the vector index for) the whole query.
-- Requires  Oracle Database 23ai (for VECTOR), the tables and vector index from
--           schema.sql, CREATE PROCEDURE (DB_DEVELOPER_ROLE has it).
--           This edition is validated by parsing (sqlglot, Oracle dialect) and
--           golden files, NOT by execution: no Oracle server was available.
-- Params    query_embedding  VECTOR(384, FLOAT32)  the query embedding
--           k                NUMBER                 number of hits (default 5)
-- Settings  Approximate search accuracy comes from the index (TARGET ACCURACY in
--           schema.sql) or per query with FETCH APPROX ... WITH TARGET ACCURACY.
-- Plan      As retrieve.sql: VECTOR INDEX HNSW SCAN inside the materialized hits CTE.
-- Usage     SELECT * FROM retrieve_sections(TO_VECTOR(:query_embedding, 384, FLOAT32), 5);
--           (:query_embedding a CLOB bind holding '[0.1, ...]', as in retrieve.sql)
-- =============================================================================
CREATE OR REPLACE FUNCTION retrieve_sections (
    query_embedding VECTOR,
    k NUMBER DEFAULT 5
) RETURN VARCHAR2 SQL_MACRO(TABLE)
IS
BEGIN
    RETURN q'~
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
           s.parent_sequence_index,
           VECTOR_DISTANCE(s.embedding, query_embedding, COSINE) AS distance
      FROM sections s
     ORDER BY VECTOR_DISTANCE(s.embedding, query_embedding, COSINE)
     FETCH APPROX FIRST k ROWS ONLY
),
context_keys AS (
    -- UNION ALL is enough: MINUS returns distinct rows
    SELECT h.doc_id, h.sequence_index - 1 AS sequence_index
      FROM hits h
    UNION ALL
    SELECT h.doc_id, h.sequence_index + 1
      FROM hits h
    UNION ALL
    SELECT h.doc_id, h.parent_sequence_index
      FROM hits h
     WHERE h.parent_sequence_index IS NOT NULL
    MINUS
    SELECT h.doc_id, h.sequence_index
      FROM hits h
)
SELECT row_number() OVER (ORDER BY h.distance, NLSSORT(h.doc_id, 'NLS_SORT=BINARY'), h.sequence_index) AS hit_rank,
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
       s.doc_id,
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
  FROM context_keys w
  JOIN sections s
    ON s.doc_id = w.doc_id
   AND s.sequence_index = w.sequence_index

~';
END;
/
