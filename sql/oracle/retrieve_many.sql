-- =============================================================================
-- onetrip: retrieve_many.sql (Oracle Database 23ai edition)
-- -----------------------------------------------------------------------------
-- Purpose   retrieve.sql for several query embeddings at once: each query's
--           top-K sections, each with its parent and previous/next sections.
--           ONE statement for all the queries; a section comes back once
--           however many hits (of however many queries) it serves, except a
--           section that is a hit of several queries (one row per query).
-- Requires  Oracle Database 23ai (23.4+), tables and indexes from schema.sql:
--           sections with the vector index sections_embedding_hnsw and the unique
--           index sections_doc_seq_key.
--           This edition is validated by parsing (sqlglot, Oracle dialect) and
--           by running its logic translated to PostgreSQL (the tests compare it
--           with onetrip's Python API, Retriever.search_many), NOT by execution
--           on Oracle: no Oracle server was available.
-- Params    :query_embeddings  CLOB    ONE JSON array holding the query embeddings,
--                      '[[0.1, ...], [0.2, ...]]' (384 numbers each): JSON_TABLE
--                      makes a row of each (query_ord 1..n by FOR ORDINALITY;
--                      ERROR ON ERROR, so malformed JSON is an error) and
--                      TO_VECTOR(..., 384, FLOAT32) a vector (SQL*Plus has no VECTOR
--                      or array bind type; one vector as text is already over
--                      the 4,000 bytes of a VARCHAR2 bind). A null element is
--                      expected to be an error, not no hits (from the docs, not
--                      run: the FORMAT JSON column holds the text null, which
--                      TO_VECTOR refuses, ORA-51804); the IS NOT NULL guard
--                      covers a SQL NULL
--           :k                 NUMBER  number of hits (top-K) of each query
--           SQL*Plus (a line holds at most 2,500 characters and a PL/SQL
--           string expression at most 32,767 bytes: give the array in pieces,
--           one assignment per vector, or bind it from python-oracledb):
--                     VARIABLE query_embeddings CLOB
--                     VARIABLE k NUMBER
--                     BEGIN
--                       :query_embeddings := '[[0.0123, -0.0456, ...'
--                                         || ' ..., 0.0789]';
--                       :query_embeddings := :query_embeddings
--                                         || ', [0.0321, ..., -0.0987]]';
--                       :k := 5;
--                     END;
--                     /
--                     SET LONG 100000
--                     @retrieve_many.sql
-- Plan      On tables of a few thousand sections or more (a small table is
--           rightly read whole and sorted), expect one approximate search per
--           query: NESTED LOOPS over the JSON_TABLE rows (JSONTABLE EVALUATION),
--           each driving the lateral view (CROSS APPLY) whose plan is
--           retrieve.sql's: SORT ORDER BY STOPKEY over VECTOR INDEX HNSW SCAN
--           on sections_embedding_hnsw; the hits materialized once (the
--           MATERIALIZE hint); then one index unique scan on sections_doc_seq_key
--           per distinct context section.
--           NOT VERIFIED: Oracle documents its HNSW plans for a single-table
--           query whose vector is a bind; that it keeps the vector index when
--           the vector comes from the row before a lateral view was not
--           checked. If DBMS_XPLAN.DISPLAY_CURSOR shows TABLE ACCESS FULL on
--           sections inside the view, add the access path hint
--           VECTOR_INDEX_SCAN(s sections_embedding_hnsw) to the lateral SELECT (a
--           single table without predicates, the case Oracle documents it for).
--           Rows loaded after the index was built are searched exactly until
--           it is repopulated (schema.sql).
-- Returns   query_ord: the query (1..n, in the order of the JSON array) whose
--           hit the row is; hit_rank 1..k within that query, by distance (ties:
--           doc_id in binary order, sequence_index). Context rows (query_ord,
--           hit_rank and distance NULL): every hit's parent and previous/next
--           section that is not itself a hit of any query; link each hit to
--           its parent and neighbors by key among ALL the rows (another
--           query's hit can be one), as in retrieve.sql. heading and content
--           are NULL where empty (Oracle stores '' as NULL).
-- Order     None guaranteed. To read it in SQL*Plus, add to the file's end
--           (before the final ;): ORDER BY query_ord, hit_rank, doc_id, sequence_index
-- =============================================================================
WITH queries AS (
    SELECT q.query_ord, TO_VECTOR(q.embedding, 384, FLOAT32) AS embedding
      FROM JSON_TABLE(:query_embeddings, '$[*]' ERROR ON ERROR
                      COLUMNS (query_ord FOR ORDINALITY, embedding CLOB FORMAT JSON PATH '$')) q
),
hits AS (
    SELECT /*+ MATERIALIZE */ q.query_ord,
           n.*
      FROM queries q
     CROSS APPLY (
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
                  s.parent_sequence_index,
                  VECTOR_DISTANCE(s.embedding, q.embedding, COSINE) AS distance
             FROM sections s
            ORDER BY VECTOR_DISTANCE(s.embedding, q.embedding, COSINE)
            FETCH APPROX FIRST :k ROWS ONLY
           ) n
     WHERE q.embedding IS NOT NULL  -- a NULL one finds nothing (it had taken k rows, in no order)
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
SELECT h.query_ord,
       row_number() OVER (PARTITION BY h.query_ord ORDER BY h.distance, NLSSORT(h.doc_id, 'NLS_SORT=BINARY'), h.sequence_index) AS hit_rank,
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
