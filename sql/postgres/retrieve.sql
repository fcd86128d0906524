-- =============================================================================
-- onetrip: retrieve.sql (PostgreSQL edition)
-- -----------------------------------------------------------------------------
-- Purpose   The one-round-trip retrieval query: the top-K sections nearest to a
--           query embedding, each with its parent section and its previous and
--           next sections in document order. ONE statement; each section
--           comes back once, however many hits it serves (see Returns).
-- Requires  PostgreSQL 13+ (tested on 18), pgvector 0.8+.
--           Tables and indexes from schema.sql: sections with the HNSW
--           index sections_embedding_hnsw and the unique index sections_doc_seq_key.
-- Params    :'query_embedding'::vector  vector(384)   the query embedding, e.g. '[0.1, ...]'
--           :'k'::integer  integer       number of hits (top-K)
--           psql: psql -v k=5 -v query_embedding='[...]' -f retrieve.sql
-- Settings  hnsw.ef_search (default 40) is the HNSW candidate list, and with
--           iterative scans off (the server default) it is also the most rows
--           the scan returns: at k > 40 this returns 40 hits. Run SET hnsw.iterative_scan = relaxed_order
--           (what onetrip's Python API sets on each connection, with
--           hnsw.max_scan_tuples = 20000) or SET hnsw.ef_search to at least k.
-- Plan      On tables of a few thousand sections or more, expect the hits
--           CTE to use the index, not a Sort over a Seq Scan (EXPLAIN, 10,000
--           sections; a table of a few hundred is rightly read whole and sorted):
--             Append
--               CTE hits
--                 ->  Limit
--                       ->  Index Scan using sections_embedding_hnsw on sections s_1
--                             Order By: (embedding <=> '...'::vector)
--               ->  Subquery Scan ... -> WindowAgg -> Sort -> CTE Scan on hits h
--               ->  Nested Loop
--                     ->  HashSetOp Except  (the context keys, from the hits)
--                     ->  Index Scan using sections_doc_seq_key on sections s
--           The context keys are hash set operations on the hits (no table
--           access: sequence_index - 1, + 1 and parent_sequence_index, minus
--           the hits), then one index lookup per DISTINCT context section.
--           Ordering by 1 - (embedding <=> q) instead of the bare operator
--           loses the index.
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
--           read it in psql, add to the file's end: ORDER BY hit_rank, doc_id, sequence_index
-- onetrip   The Python API sends this statement with two changes, each ~10-25 us
--           per query at 1 ms RTT: no hit_rank column (it ranks the hits,
--           the rows with a distance, by the same key), and a constant
--           HNSW LIMIT (k itself when k is a bucket of retrieve.K_BUCKETS: 4, 5, 8,
--           10, 16, 20, 50, ...; else
--           the next such bucket, then LIMIT :k), so a prepared statement keeps
--           one generic plan. The bucket can change the hits: when it exceeds
--           hnsw.ef_search (on the default 40: a k above 20 that is not itself a
--           bucket), the API's scan reads
--           the bucket's rows, past the first ef_search, and keeps the k nearest,
--           where this file keeps the first k the scan returns (10,000 synthetic
--           sections, k = 35: another hit set for 18 of 100 queries, recall@k
--           against an exact scan 0.993 for the API, 0.984 here). With
--           hnsw.ef_search at least the bucket both return the same rows,
--           except where distances tie at the k-th place (copies of one text):
--           for a k that is not a bucket the API keeps the tied rows first by
--           doc_id and sequence_index; this file, and the API at a k that is a
--           bucket, keep those the scan returns first.
-- =============================================================================
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
           s.embedding <=> :'query_embedding'::vector AS distance
      FROM sections s
     ORDER BY s.embedding <=> :'query_embedding'::vector
     LIMIT :'k'::integer
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
