-- =============================================================================
-- onetrip: retrieve_many_hybrid.sql (PostgreSQL edition)
-- -----------------------------------------------------------------------------
-- Purpose   retrieve_hybrid.sql for several queries at once: each query's
--           top-N sections by vector distance and top-N by its words (any word
--           may match, rare ones weigh most, plus its exact technical terms),
--           fused by Reciprocal Rank Fusion per query, then each query's top-K
--           fused hits with their parent and previous/next sections. ONE
--           statement for all the queries; a section comes back once however
--           many hits (of however many queries) it serves, except a section that
--           is a hit of several queries (one row per query).
-- Requires  PostgreSQL 13+ (tested on 18), pgvector 0.8+.
--           Tables and indexes from schema.sql: sections with the HNSW
--           index sections_embedding_hnsw and the unique index sections_doc_seq_key,
--           the GIN indexes sections_tsv_gin and sections_terms_gin, its primary key,
--           and term_stats (the word weights).
-- Params    :'query_embeddings'::vector[]  vector(384)[]  the query embeddings,
--                      e.g. '{"[0.1, ...]","[0.2, ...]"}'
--           :'query_texts'::text[]  text[]  the queries as typed, one per embedding, same order
--           :'query_terms'::text[]  text[]  ONE STRING PER QUERY: that query's exact
--                      technical terms, lower-case, joined by spaces ('' for
--                      none), same order, e.g. '{"max_connections work_mem",""}'
--                      (not retrieve_hybrid.sql's one array of terms)
--           The three arrays must have one entry per query: unnest pads a
--           shorter one with NULLs, which adds a query (onetrip's Python API
--           checks; this file does not). A NULL embedding ranks that query
--           on its words alone; a NULL text, on its embedding alone.
--           :'k'::integer  integer  number of hits (top-K) of each query
--           candidates, rrf_k, dense_weight, lexical_weight, term_weight,
--           max_term_share, rare_term_sections, tf_weight: as in
--           retrieve_hybrid.sql, for every query
--           psql: psql -v k=5 -v query_embeddings='{"[...]","[...]"}' \
--                 -v query_texts='{"How do I ...?","What is ...?"}' -v query_terms='{"",""}' \
--                 -v candidates=50 -v rrf_k=60 -v dense_weight=1.0 -v lexical_weight=0.3 \
--                 -v term_weight=10.0 -v max_term_share=0.03 -v rare_term_sections=100 \
--                 -v tf_weight=0 -f retrieve_many_hybrid.sql
-- Settings  As for retrieve.sql: with iterative scans off (the server default)
--           each query's HNSW scan returns at most hnsw.ef_search (40) rows; SET
--           hnsw.iterative_scan = relaxed_order (as onetrip's Python API does)
--           or hnsw.ef_search to at least :candidates.
-- Plan      On tables of a few thousand sections or more, expect one HNSW
--           scan per query, in a Nested Loop over the queries:
--               CTE dense
--                 ->  WindowAgg  ->  Sort      (each query's ranks)
--                       ->  Nested Loop
--                             ->  CTE Scan on queries q
--                             ->  Limit  ->  Sort  (ties: doc_id, section_id)
--                                   ->  Subquery Scan  ->  Limit
--                                         ->  Index Scan using sections_embedding_hnsw
--                                               Order By: (embedding <=> q.embedding)
--           and for the words a Nested Loop over (query, word) pairs, each a
--           Bitmap Heap Scan on sections_tsv_gin, plus one on
--           sections_terms_gin per query; then a sort per query.
--           The query vectors come from a lateral reference, so each scan
--           takes its query as a parameter; a plain join to the queries would
--           be a Sort over a Seq Scan. Then the context keys of all hits, read
--           once each, as in retrieve.sql.
-- Returns   query_ord: the query (1..n, in the order of query_embeddings) whose
--           hit the row is; hit_rank 1..k within that query, by fused score (then distance) (ties:
--           doc_id, sequence_index), with score. Context rows (query_ord, hit_rank, distance and score
--           NULL): every hit's parent and previous/next section that is
--           not itself a hit of any query; link them by key as in retrieve.sql.
-- Order     None guaranteed. To read it in psql, add to the file's end:
--             ORDER BY query_ord, hit_rank, doc_id, sequence_index
-- onetrip   Retriever.search_many sends this statement without hit_rank, with a
--           constant HNSW LIMIT bucket (then LIMIT :candidates), as retrieve.sql's note
--           says (a bucket above hnsw.ef_search can change the rows, as it
--           says too), and with the arrays behind an OFFSET 0 fence: a visible array is
--           estimated at its length, so every custom plan looked cheaper than the
--           generic one and the prepared statement was planned on every call.
-- =============================================================================
WITH queries AS MATERIALIZED (
    SELECT q.query_ord, q.embedding, q.query_text, q.query_terms
      FROM unnest(:'query_embeddings'::vector[], :'query_texts'::text[], :'query_terms'::text[]) WITH ORDINALITY q (embedding, query_text, query_terms, query_ord)
),
dense AS MATERIALIZED (
    SELECT q.query_ord,
           n.doc_id,
           n.section_id,
           n.distance,
           row_number() OVER (PARTITION BY q.query_ord ORDER BY n.distance + 0, n.doc_id, n.section_id) AS rank
      FROM queries q
     CROSS JOIN LATERAL (
           SELECT c.*
             FROM (
                   SELECT s.doc_id,
                          s.section_id,
                          s.embedding <=> q.embedding AS distance
                     FROM sections s
                    ORDER BY s.embedding <=> q.embedding
                    LIMIT GREATEST(:'candidates'::integer, :'k'::integer)
                  ) c
            ORDER BY c.distance + 0, c.doc_id, c.section_id
            LIMIT GREATEST(:'candidates'::integer, :'k'::integer)
           ) n
     WHERE q.embedding IS NOT NULL  -- a NULL one ranks on its words alone (it had taken rows in no order)
),
query_words AS MATERIALIZED (
    -- each query's distinct stemmed words, weighted and skipped as for one query
    SELECT q.query_ord,
           w.lexeme,
           coalesce(ts.idf, 1.0) AS idf,
           ('''' || replace(replace(w.lexeme, '\', '\\'), '''', '''''') || '''')::tsquery AS query
      FROM queries q
     CROSS JOIN LATERAL unnest(tsvector_to_array(to_tsvector('english'::regconfig, q.query_text))) w (lexeme)
      -- a lookup by primary key per word (LIMIT 1 keeps the subquery from being flattened: for
      -- the ~10 words per query it estimates, the planner hashed the whole table, ~5 ms)
      LEFT JOIN LATERAL (
           SELECT ts.lexeme, ts.idf, ts.sections, ts.share
             FROM term_stats ts
            WHERE ts.lexeme = w.lexeme
            LIMIT 1
           ) ts
        ON true
     WHERE ts.lexeme IS NULL
        OR ts.sections <= :'rare_term_sections'::integer
        OR ts.share <= :'max_term_share'::float8
),
lexical AS MATERIALIZED (
    SELECT r.query_ord,
           r.doc_id,
           r.section_id,
           r.lex_score,
           r.rank
      FROM (
            SELECT m.query_ord,
                   m.doc_id,
                   m.section_id,
                   sum(round(m.weight * 1048576)) / 1048576 AS lex_score,
                   row_number() OVER (PARTITION BY m.query_ord
                                      ORDER BY sum(round(m.weight * 1048576)) / 1048576 DESC,
                                               m.doc_id, m.section_id) AS rank
              FROM (
                    SELECT w.query_ord, s.doc_id, s.section_id,
                           w.idf * CASE WHEN :'tf_weight'::float8 > 0
                                        THEN 1 + :'tf_weight'::float8 * (ts_rank(s.tsv, w.query, 0) / 0.0607927 - 1)
                                        ELSE 1 END AS weight
                      FROM query_words w
                      JOIN sections s
                        ON s.tsv @@ w.query
                    UNION ALL
                    SELECT q.query_ord, s.doc_id, s.section_id, :'term_weight'::float8
                      FROM queries q
                      JOIN sections s
                        ON s.terms && string_to_array(q.query_terms, ' ')
                   ) m
             GROUP BY m.query_ord, m.doc_id, m.section_id
           ) r
     WHERE r.rank <= GREATEST(:'candidates'::integer, :'k'::integer)
),
fused AS (
    SELECT c.query_ord,
           c.doc_id,
           c.section_id,
           sum(c.weight / (:'rrf_k'::integer + c.rank)) AS score
      FROM (
            SELECT d.query_ord, d.doc_id, d.section_id, :'dense_weight'::float8 AS weight, d.rank
              FROM dense d
            UNION ALL
            SELECT l.query_ord, l.doc_id, l.section_id, :'lexical_weight'::float8 AS weight, l.rank
              FROM lexical l
           ) c
     GROUP BY c.query_ord, c.doc_id, c.section_id
),
hits AS MATERIALIZED (
    SELECT r.*
      FROM (
            SELECT f.query_ord,
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
                   s.parent_sequence_index,
                   s.embedding <=> q.embedding AS distance,
                   f.score,
                   row_number() OVER (PARTITION BY f.query_ord
                                      ORDER BY f.score DESC, s.embedding <=> q.embedding, s.doc_id, s.sequence_index) AS hit_ord
              FROM fused f
              JOIN queries q
                ON q.query_ord = f.query_ord
              JOIN sections s
                ON s.doc_id = f.doc_id
               AND s.section_id = f.section_id
           ) r
     WHERE r.hit_ord <= :'k'::integer
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
SELECT h.query_ord,
       row_number() OVER (PARTITION BY h.query_ord ORDER BY h.score DESC, h.distance, h.doc_id, h.sequence_index) AS hit_rank,
       h.distance,
       h.score,
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
