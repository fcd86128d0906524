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
-- Params    :query_embedding  CLOB    the query embedding as text, '[0.1, ...]'
--                      (384 numbers), read by TO_VECTOR(:query_embedding, 384, FLOAT32):
--                      SQL*Plus has no VECTOR bind type, and the text is over
--                      the 4,000 bytes of a VARCHAR2 bind
--           :k                NUMBER  number of hits (top-K)
--           SQL*Plus (a line holds at most 2,500 characters: give the vector
--           in pieces, or bind it from python-oracledb):
--                     VARIABLE query_embedding CLOB
--                     VARIABLE k NUMBER
--                     BEGIN
--                       :query_embedding := '[0.0123, -0.0456, ...'
--                                        || ' ..., 0.0789]';
--                       :k := 5;
--                     END;
--                     /
--                     SET LONG 100000
--                     @retrieve.sql
-- Plan      On tables of a few thousand sections or more (a small table is
--           rightly read whole and sorted), expect the hits CTE to be
--           materialized (the MATERIALIZE hint) and to use the vector index:
--           VECTOR INDEX HNSW SCAN on sections_embedding_hnsw, then one index
--           unique scan on sections_doc_seq_key per distinct context section.
--           Confirm with DBMS_XPLAN.DISPLAY_CURSOR; rows loaded after the index
--           was built are searched exactly until it is repopulated (schema.sql).
-- Returns   Each section ONCE. The hits: hit_rank 1..k, ranked by
--           distance (ties: doc_id, sequence_index).
--           The context rows (hit_rank and distance NULL): every hit's parent
--           and previous/next section in document order that is not itself a
--           hit. A hit's parent is the row (hit or context) with section_id =
--           its parent_section_id; its neighbors are the rows of the same doc_id
--           at sequence_index - 1 and + 1. No such row: a root, a document
--           boundary (or, with filters, a section the caller may not see). A
--           section that is the neighbor or parent of several hits is read and
--           sent once.
-- Order     None guaranteed: the statement does not sort its rows (sorting the
--           wide rows cost ~10 us per query, benchmarks/latency); onetrip links
--           rows by key. As planned, the hits come first in hit_rank order. To
--           read it in SQL*Plus, add to the file's end (before the final ;): ORDER BY hit_rank, doc_id, sequence_index
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
           s.parent_sequence_index,
           VECTOR_DISTANCE(s.embedding, TO_VECTOR(:query_embedding, 384, FLOAT32), COSINE) AS distance
      FROM sections s
     WHERE TO_VECTOR(:query_embedding, 384, FLOAT32) IS NOT NULL  -- a NULL embedding finds nothing (it had taken k rows, in no order)
     ORDER BY VECTOR_DISTANCE(s.embedding, TO_VECTOR(:query_embedding, 384, FLOAT32), COSINE)
     FETCH APPROX FIRST :k ROWS ONLY
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
   AND s.sequence_index = w.sequence_index;
