-- =============================================================================
-- onetrip: retrieve_function.sql (PostgreSQL edition)
-- -----------------------------------------------------------------------------
-- Purpose   A function wrapper around retrieve.sql for callers that prefer
--           SELECT * FROM retrieve_sections(...) to a parameterised query.
--           Same rows as retrieve.sql and as onetrip's Python API (at the same
--           hnsw.ef_search).
-- Requires  PostgreSQL 13+ (tested on 18), pgvector 0.8+; the tables and indexes
--           from schema.sql.
-- Params    query_embedding  vector(384)  the query embedding
--           k                integer      number of hits (default 5)
--           collections      text[]       only these collections (NULL: all)
--           principals       text[]       the caller's principals; rows whose acl
--                                         shares none are invisible, hits and
--                                         expanded rows alike (NULL: no check)
-- Settings  Pinned by the function's SET clause, for its own execution only:
--             hnsw.ef_search = 100   (the HNSW candidate list; >= k)
--             hnsw.iterative_scan = relaxed_order  (filtered searches still
--                                   return k rows: the scan continues past
--                                   ef_search until k rows pass the filters)
--           A function with a SET clause is never inlined, so the planner plans
--           the body on its own, with the bind values as parameters.
-- Plan      As retrieve.sql: Index Scan using sections_embedding_hnsw ... Order By
--           (embedding <=> query_embedding) inside the hits CTE.
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
    revision              integer,
    distance              double precision,
    parent_id             text,
    parent_sequence_index integer,
    parent_heading_level  smallint,
    parent_heading        text,
    parent_heading_path   text[],
    parent_content        text,
    prev_id               text,
    prev_sequence_index   integer,
    prev_heading_level    smallint,
    prev_heading          text,
    prev_heading_path     text[],
    prev_content          text,
    next_id               text,
    next_sequence_index   integer,
    next_heading_level    smallint,
    next_heading          text,
    next_heading_path     text[],
    next_content          text
)
LANGUAGE sql
STABLE
SET hnsw.ef_search = 100
SET hnsw.iterative_scan = relaxed_order
AS $function$
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
           s.embedding <=> query_embedding AS distance
      FROM sections s
     WHERE (collections IS NULL OR s.collection = ANY(collections))
       AND (principals IS NULL OR s.acl IS NULL OR s.acl && principals)
     ORDER BY s.embedding <=> query_embedding
     LIMIT k
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
        AND (collections IS NULL OR p.collection = ANY(collections))
       AND (principals IS NULL OR p.acl IS NULL OR p.acl && principals)
  LEFT JOIN sections pv
         ON pv.doc_id = h.doc_id
        AND pv.sequence_index = h.sequence_index - 1
        AND (collections IS NULL OR pv.collection = ANY(collections))
       AND (principals IS NULL OR pv.acl IS NULL OR pv.acl && principals)
  LEFT JOIN sections nx
         ON nx.doc_id = h.doc_id
        AND nx.sequence_index = h.sequence_index + 1
        AND (collections IS NULL OR nx.collection = ANY(collections))
       AND (principals IS NULL OR nx.acl IS NULL OR nx.acl && principals)
 ORDER BY h.distance, h.doc_id, h.sequence_index

$function$;
