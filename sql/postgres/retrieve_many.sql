-- =============================================================================
-- onetrip: retrieve_many.sql (PostgreSQL edition)
-- -----------------------------------------------------------------------------
-- Purpose   retrieve.sql for several query embeddings at once: each query's
--           top-K sections, each with its parent and previous/next sections.
--           ONE statement for all the queries; a section comes back once
--           however many hits (of however many queries) it serves, except a
--           section that is a hit of several queries (one row per query).
-- Requires  PostgreSQL 13+ (tested on 18), pgvector 0.8+.
--           Tables and indexes from schema.sql: sections with the HNSW
--           index sections_embedding_hnsw and the unique index sections_doc_seq_key.
-- Params    :'query_embeddings'::vector[]  vector(384)[]  the query embeddings,
--                      e.g. '{"[0.1, ...]","[0.2, ...]"}'
--           :'k'::integer  integer  number of hits (top-K) of each query
--           psql: psql -v k=5 -v query_embeddings='{"[...]","[...]"}' -f retrieve_many.sql
-- Settings  As for retrieve.sql: with iterative scans off (the server default)
--           each query's HNSW scan returns at most hnsw.ef_search (40) rows; SET
--           hnsw.iterative_scan = relaxed_order (as onetrip's Python API does)
--           or hnsw.ef_search to at least k.
-- Plan      On tables of a few thousand sections or more, expect one HNSW
--           scan per query, in a Nested Loop over the queries:
--               CTE hits
--                 ->  Nested Loop
--                       ->  CTE Scan on queries q
--                       ->  Limit
--                             ->  Index Scan using sections_embedding_hnsw on sections s
--                                   Order By: (embedding <=> q.embedding)
--           The query vectors come from a lateral reference, so each scan
--           takes its query as a parameter; a plain join to the queries would
--           be a Sort over a Seq Scan. Then the context keys of all hits, read
--           once each, as in retrieve.sql.
-- Returns   query_ord: the query (1..n, in the order of query_embeddings) whose
--           hit the row is; hit_rank 1..k within that query, by distance (ties:
--           doc_id, sequence_index). Context rows (query_ord, hit_rank and distance
--           NULL): every hit's parent and previous/next section that is
--           not itself a hit of any query; link them by key as in retrieve.sql.
-- Order     None guaranteed. To read it in psql, add to the file's end:
--             ORDER BY query_ord, hit_rank, doc_id, sequence_index
-- onetrip   Retriever.search_many sends this statement without hit_rank, with a
--           constant HNSW LIMIT bucket (then LIMIT :k), as retrieve.sql's note
--           says (a bucket above hnsw.ef_search can change the rows, as it
--           says too), and with the array behind an OFFSET 0 fence: a visible array is
--           estimated at its length, so every custom plan looked cheaper than the
--           generic one and the prepared statement was planned on every call.
-- =============================================================================
WITH queries AS MATERIALIZED (
    SELECT q.query_ord, q.embedding
      FROM unnest(:'query_embeddings'::vector[]) WITH ORDINALITY q (embedding, query_ord)
),
hits AS MATERIALIZED (
    SELECT q.query_ord,
           n.*
      FROM queries q
     CROSS JOIN LATERAL (
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
                  s.embedding <=> q.embedding AS distance
             FROM sections s
            ORDER BY s.embedding <=> q.embedding
            LIMIT :'k'::integer
           ) n
     WHERE q.embedding IS NOT NULL  -- a NULL one finds nothing (it had taken k rows, in no order)
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
SELECT h.query_ord,
       row_number() OVER (PARTITION BY h.query_ord ORDER BY h.distance + 0, h.doc_id, h.sequence_index) AS hit_rank,
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
   AND s.sequence_index = w.sequence_index
