-- =============================================================================
-- onetrip: retrieve_macro.sql (Oracle Database 23ai edition)
-- -----------------------------------------------------------------------------
-- Purpose   A table SQL macro returning retrieve.sql's rows, Oracle's natural
--           equivalent of a set-returning function: the query text is expanded
--           into the caller's statement at parse time, so the optimizer sees (and
--           can use the vector index for) the whole query. Same filters as
--           the PostgreSQL edition's retrieve_function.sql.
-- No WITH   Unlike retrieve.sql, the query has no WITH clause: Oracle substitutes
--           a table macro's scalar parameters as columns of an outer inline view
--           joined laterally to the macro's text, and a WITH subquery cannot
--           reference them (blog.sqlora.com, "SQL macros and the WITH clause",
--           2024), so a hits CTE reading query_embedding and k would, by that
--           report, fail on every call (not run here). The parameters are read in inline views of the one main
--           query instead: x, the approximate search (keys and distance only);
--           h, x numbered (hit_rank); c, four constant rows (0 the hit, -1/1 the
--           previous/next section, 2 the parent) cross joined to h; sections s
--           joined on (doc_id, sequence_index) with the filters; and r, one row
--           per section, the hit's when it is one (ROW_NUMBER over the key).
--           Same rows and columns as retrieve.sql: the hits (hit_rank 1..k, with
--           distance) first, then each context row once, by key.
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
-- NULL      A NULL query_embedding returns no rows. The PostgreSQL function
--           raises 'query_embedding must not be NULL'; a SQL macro cannot
--           raise, so its search has query_embedding IS NOT NULL in its WHERE
--           (without it, FETCH APPROX by a NULL distance took k rows, in no
--           order, as hits). A k that is NULL or below 1 returns no rows, and
--           one above 1000 is taken as given, where the PostgreSQL function
--           raises 22023 for both: FETCH FIRST reads a NULL or negative count
--           as 0 (and truncates a fraction), and the macro cannot raise.
-- Settings  Approximate search accuracy comes from the index (TARGET ACCURACY in
--           schema.sql) or per query with FETCH APPROX ... WITH TARGET ACCURACY.
-- Plan      Expected, not observed: VECTOR INDEX HNSW SCAN under the FETCH
--           APPROX of inline view x (run once: h is read once, no WITH to
--           materialize), a WINDOW SORT of its k rows for hit_rank, a
--           NESTED LOOPS of h's k rows x c's 4 rows probing the (doc_id,
--           sequence_index) key of sections (at most 4k probes, the hits' own
--           rows among them), a WINDOW SORT keeping one row per section, and the
--           final SORT ORDER BY of at most 4k rows.
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
SELECT r.hit_rank,
       r.distance,
       r.doc_id,
       r.section_id,
       r.parent_section_id,
       r.sequence_index,
       r.heading_level,
       r.heading,
       r.heading_path,
       r.anchor,
       r.content,
       r.token_count,
       r.revision
  FROM (SELECT CASE WHEN c.rel = 0 THEN h.hit_rank END AS hit_rank,
               CASE WHEN c.rel = 0 THEN h.distance END AS distance,
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
               s.revision,
               ROW_NUMBER() OVER (PARTITION BY s.doc_id, s.sequence_index
                                  ORDER BY CASE WHEN c.rel = 0 THEN 0 ELSE 1 END) AS section_copy
          FROM (SELECT x.doc_id,
                       x.sequence_index,
                       x.parent_sequence_index,
                       x.distance,
                       ROW_NUMBER() OVER (ORDER BY x.distance, NLSSORT(x.doc_id, 'NLS_SORT=BINARY'), x.sequence_index) AS hit_rank
                  FROM (SELECT s.doc_id,
                               s.sequence_index,
                               s.parent_sequence_index,
                               VECTOR_DISTANCE(s.embedding, query_embedding, COSINE) AS distance
                          FROM sections s
                         WHERE query_embedding IS NOT NULL  -- a NULL embedding finds nothing (it had taken k rows, in no order)
                           AND (collections IS NULL OR s.collection IN (
                                  SELECT cc.collection
                                    FROM JSON_TABLE(collections, '$[*]' ERROR ON ERROR
                                                    COLUMNS (collection VARCHAR2(512 CHAR) PATH '$')) cc))
                           AND (principals IS NULL OR s.acl IS NULL OR EXISTS (
                                  SELECT 1
                                    FROM JSON_TABLE(principals, '$[*]' ERROR ON ERROR
                                                    COLUMNS (principal VARCHAR2(512 CHAR) PATH '$')) cp
                                   WHERE JSON_EXISTS(s.acl, '$[*]?(@ == $p)' PASSING cp.principal AS "p")))
                         ORDER BY VECTOR_DISTANCE(s.embedding, query_embedding, COSINE)
                         FETCH APPROX FIRST k ROWS ONLY) x) h
         CROSS JOIN (SELECT 0 AS rel FROM dual  -- the hit itself
                     UNION ALL
                     SELECT -1 FROM dual  -- the previous section
                     UNION ALL
                     SELECT 1 FROM dual  -- the next section
                     UNION ALL
                     SELECT 2 FROM dual  -- the parent
                    ) c
          JOIN sections s
            ON s.doc_id = h.doc_id
           AND s.sequence_index = CASE c.rel WHEN 2 THEN h.parent_sequence_index ELSE h.sequence_index + c.rel END
           AND (collections IS NULL OR s.collection IN (
                      SELECT cc.collection
                        FROM JSON_TABLE(collections, '$[*]' ERROR ON ERROR
                                        COLUMNS (collection VARCHAR2(512 CHAR) PATH '$')) cc))
           AND (principals IS NULL OR s.acl IS NULL OR EXISTS (
                      SELECT 1
                        FROM JSON_TABLE(principals, '$[*]' ERROR ON ERROR
                                        COLUMNS (principal VARCHAR2(512 CHAR) PATH '$')) cp
                       WHERE JSON_EXISTS(s.acl, '$[*]?(@ == $p)' PASSING cp.principal AS "p")))) r
 WHERE r.section_copy = 1
 ORDER BY r.hit_rank NULLS LAST, NLSSORT(r.doc_id, 'NLS_SORT=BINARY'), r.sequence_index

~';
END;
/
