-- =============================================================================
-- onetrip: retrieve_macro.sql (Oracle Database 23ai edition)
-- -----------------------------------------------------------------------------
-- Purpose   A table SQL macro around retrieve.sql, Oracle's natural equivalent
--           of a set-returning function: the query text is expanded into the
--           caller's statement at parse time, so the optimizer sees (and can
--           use the vector index for) the whole query. Same filters as
--           the PostgreSQL edition's retrieve_function.sql.
-- Requires  Oracle Database 23ai (for VECTOR), the tables and vector index from
--           schema.sql, CREATE PROCEDURE (DB_DEVELOPER_ROLE has it).
--           This edition is validated by parsing (sqlglot, Oracle dialect) and
--           golden files, NOT by execution: no Oracle server was available.
-- Params    query_embedding  VECTOR(384, FLOAT32)  the query embedding
--           k                NUMBER                 number of hits (default 5)
--           collections      VARCHAR2  a JSON array of collection names,
--                                      '["manual", "faq"]': only these
--                                      collections (NULL, the default: all)
--           principals       VARCHAR2  a JSON array of the caller's principals,
--                                      '["hr", "u:42"]': rows whose acl (a JSON
--                                      array) shares none are invisible, hits and
--                                      expanded rows alike; rows without acl are
--                                      visible (NULL, the default: no check)
--           '[]' matches no collection and no acl (as an empty text[] does in
--           PostgreSQL); a list that is not JSON raises an error (JSON_TABLE
--           ... ERROR ON ERROR), as a malformed text[] does. A VARCHAR2 bind
--           holds 4,000 bytes (32,767 with MAX_STRING_SIZE = EXTENDED).
-- Lists     A JSON array in a VARCHAR2, not a collection type
--           (SYS.ODCIVARCHAR2LIST, a TABLE OF VARCHAR2): acl is stored as JSON
--           (schema.sql), so the check reads JSON on the row's side whatever
--           the list's type; a scalar argument is what a table SQL macro
--           substitutes by name into the text it returns, as for k; every
--           client binds text (SQL*Plus VARIABLE ... VARCHAR2, a python-oracledb
--           str), where a collection needs an object-type bind (none in
--           SQL*Plus); and there is no type to create or grant. The filters
--           are in the returned SQL, not chosen by the macro's body: a bind
--           argument's value is not known at expansion (the body sees NULL),
--           and one expanded cursor serves every value.
-- Settings  Approximate search accuracy comes from the index (TARGET ACCURACY in
--           schema.sql) or per query with FETCH APPROX ... WITH TARGET ACCURACY.
-- Plan      As retrieve.sql: VECTOR INDEX HNSW SCAN inside the materialized hits CTE.
--           With a list given, its filter is part of the approximate search
--           (FETCH APPROX under a WHERE): the optimizer pre-filters (evaluates
--           the filters, then searches the graph among the rows that pass) or
--           in-filters (tests each graph candidate as it is visited), by cost,
--           or searches exactly when few rows pass; either way k hits that
--           pass come back when k exist, not a post-filtered top-k that holds
--           fewer (what pgvector needs iterative scans for). An omitted list's
--           predicate is NULL IS NULL, true for every row. The context rows
--           pass the same filters in their join. Unverified here: confirm with
--           DBMS_XPLAN.DISPLAY_CURSOR.
-- Usage     SELECT * FROM retrieve_sections(TO_VECTOR(:query_embedding, 384, FLOAT32), 5);
--           SELECT * FROM retrieve_sections(TO_VECTOR(:query_embedding, 384, FLOAT32), 5,
--                                         NULL, '["hr", "u:42"]');
--           SELECT * FROM retrieve_sections(TO_VECTOR(:query_embedding, 384, FLOAT32), 5,
--                                         :collections, :principals);
--           (:query_embedding a CLOB bind holding '[0.1, ...]', as in retrieve.sql;
--           the lists VARCHAR2 binds holding a JSON array, or NULL)
-- =============================================================================
CREATE OR REPLACE FUNCTION retrieve_sections (
    query_embedding VECTOR,
    k NUMBER DEFAULT 5,
    collections VARCHAR2 DEFAULT NULL,
    principals VARCHAR2 DEFAULT NULL
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
     WHERE (collections IS NULL OR s.collection IN (
              SELECT cc.collection
                FROM JSON_TABLE(collections, '$[*]' ERROR ON ERROR
                                COLUMNS (collection VARCHAR2(512 CHAR) PATH '$')) cc))
       AND (principals IS NULL OR s.acl IS NULL OR EXISTS (
              SELECT 1
                FROM JSON_TABLE(principals, '$[*]' ERROR ON ERROR
                                COLUMNS (principal VARCHAR2(512 CHAR) PATH '$')) cp
               WHERE JSON_EXISTS(s.acl, '$[*]?(@ == $p)' PASSING cp.principal AS "p")))
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
   AND (collections IS NULL OR s.collection IN (
              SELECT cc.collection
                FROM JSON_TABLE(collections, '$[*]' ERROR ON ERROR
                                COLUMNS (collection VARCHAR2(512 CHAR) PATH '$')) cc))
   AND (principals IS NULL OR s.acl IS NULL OR EXISTS (
              SELECT 1
                FROM JSON_TABLE(principals, '$[*]' ERROR ON ERROR
                                COLUMNS (principal VARCHAR2(512 CHAR) PATH '$')) cp
               WHERE JSON_EXISTS(s.acl, '$[*]?(@ == $p)' PASSING cp.principal AS "p")))

~';
END;
/
