-- =============================================================================
-- onetrip: retrieve_function.sql (PostgreSQL edition)
-- -----------------------------------------------------------------------------
-- Purpose   A function wrapper around retrieve.sql for callers that prefer
--           SELECT * FROM retrieve_sections(...) to a parameterised query.
--           Same rows as retrieve.sql run with these settings, and as onetrip's
--           Python API at hnsw.ef_search = 100 for k up to 100 (up to ties in
--           distance at the k-th place: see retrieve.sql, onetrip), when no
--           collections or principals are given. Past that k the API's HNSW
--           scan reads k's bucket (200, 500, 1000) and keeps the k nearest
--           rows, where this keeps the first k the scan returns: the hit sets
--           can differ (see retrieve.sql, onetrip). With collections or
--           principals the planner may choose another plan here than for the
--           API's statement (a small collection: its btree index and an exact
--           sort): both return k rows that pass the filters, but an exact and
--           an approximate search can differ in a few of them.
-- Requires  PostgreSQL 13+ (tested on 18 and on 15), pgvector 0.8+; the tables
--           and indexes from schema.sql.
-- Params    query_embedding  vector(384)  the query embedding
--           k                integer      number of hits (default 5)
--           collections      text[]       only these collections (NULL: all)
--           principals       text[]       the caller's principals; rows whose acl
--                                         shares none are invisible, hits and
--                                         expanded rows alike (NULL: no check)
-- Settings  Pinned by the function's SET clause, for its own execution only:
--             hnsw.ef_search = 100   (the HNSW candidate list; a larger k
--                                   is reached by the iterative scan)
--             hnsw.iterative_scan = relaxed_order  (filtered searches still
--                                   return k rows: the scan continues past
--                                   ef_search until k rows pass the filters,
--                                   or until it has read hnsw.max_scan_tuples
--                                   rows, which is NOT pinned: the caller's
--                                   setting, 20000 by default, as onetrip's
--                                   Python API sets it; a filter that few of
--                                   the nearest rows pass returns fewer)
--             plan_cache_mode = force_custom_plan  (the body is planned for each
--                                   call's k: a generic plan, which a server set
--                                   to force_generic_plan would use, reads
--                                   LIMIT k as 10% of the table and joins the
--                                   context by Hash Join over a Seq Scan of
--                                   sections: 2.8-3.0 ms against 1.2-1.5 per
--                                   call, k=10, on 9,341 rows, PostgreSQL 18)
-- Language  PL/pgSQL, for the plan cache: its RETURN QUERY is planned through
--           it on every version, so the SET clause above holds. As LANGUAGE
--           sql the body was planned without its argument values before
--           PostgreSQL 18, whatever plan_cache_mode said: on PostgreSQL 15 it
--           read all of sections on every call (10,000 rows, k=10: 26 ms a
--           call against 1.6 ms as PL/pgSQL). On PostgreSQL 18 the two cost
--           the same (manual, 9,341 rows, k=10: 1.38 ms sql, 1.31 PL/pgSQL).
--           #variable_conflict use_column: a name that is both a column and
--           an output column (doc_id, distance, ...) means the column; the
--           parameters are written qualified (retrieve_sections.k), so a
--           column of their name can never stand in for them.
-- Errors    k NULL or outside 1..1000, or a NULL query_embedding: an error
--           (22023 / 22004), as the Python API refuses them.
-- Plan      As retrieve.sql: Index Scan using sections_embedding_hnsw ... Order By
--           (embedding <=> query_embedding) inside the hits CTE.
-- Install   psql -f retrieve_function.sql (as the tables' owner). The body names
--           the tables without a schema: they resolve through the caller's
--           search_path (render with --schema to pin them).
-- Usage     SELECT * FROM retrieve_sections('[0.1, ...]'::vector, 5);
--           SELECT * FROM retrieve_sections('[...]', 5, principals => ARRAY['hr']);
-- =============================================================================
CREATE OR REPLACE FUNCTION retrieve_sections(
    query_embedding vector(384),
    k integer DEFAULT 5,
    collections text[] DEFAULT NULL,
    principals text[] DEFAULT NULL
)
RETURNS TABLE (
    hit_rank              bigint,
    distance              double precision,
    doc_id                text,
    section_id            text,
    parent_section_id     text,
    sequence_index        integer,
    heading_level         smallint,
    heading               text,
    heading_path          text[],
    anchor                text,
    content               text,
    token_count           integer,
    revision              integer
)
LANGUAGE plpgsql
STABLE
SET hnsw.ef_search = 100
SET hnsw.iterative_scan = relaxed_order
SET plan_cache_mode = force_custom_plan
AS $function$
#variable_conflict use_column
BEGIN
    -- what the Python API refuses too: LIMIT NULL would return every row as a hit
    IF retrieve_sections.k IS NULL OR retrieve_sections.k NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'k must be an integer from 1 to 1000, got %', retrieve_sections.k
              USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF retrieve_sections.query_embedding IS NULL THEN
        RAISE EXCEPTION 'query_embedding must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    RETURN QUERY
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
               s.parent_sequence_index,
               s.embedding <=> retrieve_sections.query_embedding AS distance
          FROM sections s
         WHERE (retrieve_sections.collections IS NULL OR s.collection = ANY(retrieve_sections.collections))
           AND (retrieve_sections.principals IS NULL OR s.acl IS NULL OR s.acl && retrieve_sections.principals)
         ORDER BY s.embedding <=> retrieve_sections.query_embedding
         LIMIT retrieve_sections.k
    ),
    context_keys AS (
        -- UNION ALL is enough: EXCEPT returns distinct rows
        SELECT h.doc_id, h.sequence_index - 1 AS sequence_index
          FROM hits h
        UNION ALL
        SELECT h.doc_id, h.sequence_index + 1
          FROM hits h
        UNION ALL
        SELECT h.doc_id, h.parent_sequence_index
          FROM hits h
         WHERE h.parent_sequence_index IS NOT NULL
        EXCEPT
        SELECT h.doc_id, h.sequence_index
          FROM hits h
    )
    -- hit_rank by h.distance + 0: the real distance order (a relaxed-order HNSW scan returns rows
    -- slightly out of it, and PostgreSQL 17+ would take the hits as sorted and skip this sort)
    SELECT row_number() OVER (ORDER BY h.distance + 0, h.doc_id, h.sequence_index) AS hit_rank,
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
       AND (retrieve_sections.collections IS NULL OR s.collection = ANY(retrieve_sections.collections))
       AND (retrieve_sections.principals IS NULL OR s.acl IS NULL OR s.acl && retrieve_sections.principals);
END
$function$;
