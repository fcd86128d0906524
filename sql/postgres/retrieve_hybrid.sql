-- =============================================================================
-- onetrip: retrieve_hybrid.sql (PostgreSQL edition)
-- -----------------------------------------------------------------------------
-- Purpose   Hybrid retrieval in one round trip: the top-N sections by vector
--           distance (HNSW) and the top-N by the summed idf of the query words
--           they hold (GIN, tsv column; plus exact technical terms), fused by
--           Reciprocal Rank Fusion, then the
--           top-K fused hits, each with its parent and previous/next sections.
--           ONE statement; each section comes back once (see Returns).
-- Requires  PostgreSQL 13+ (tested on 18), pgvector 0.8+.
--           Tables and indexes from schema.sql: sections with the HNSW
--           index sections_embedding_hnsw and the unique index sections_doc_seq_key,
--           the GIN indexes sections_tsv_gin and sections_terms_gin, its primary key,
--           and term_stats (the word weights).
-- Params    :'query_embedding'::vector  vector(384)   the query embedding, e.g. '[0.1, ...]'
--           :'k'::integer  integer       number of hits (top-K)
--           :'query_text'  text  the query as typed; any of its stemmed words may match
--           :'query_terms'::text[]  text[]  exact technical terms of the query, lower-case,
--                      e.g. '{max_connections}' ('{}' if none)
--           :'candidates'::integer  integer  candidates per list (N, e.g. 50; k if larger)
--           :'rrf_k'::integer  integer  RRF constant (60)
--           :'dense_weight'::float8, :'lexical_weight'::float8  float  list weights (1.0, 0.3)
--           :'term_weight'::float8  float  lexical score of an exact technical term (10.0)
--           :'max_term_share'::float8  float  skip words in more than this share of
--                      the sections (0.03) ...
--           :'rare_term_sections'::integer  integer  ... and in more than this many (100)
--           :'tf_weight'::float8  float  term frequency's weight in the lexical score (0:
--                      presence only, as this hybrid edition is tuned; 2.0 for lexical alone)
--           Word weights come from term_stats: run `onetrip refresh-term-stats`
--           (or the statements in schema.sql's header, Words) after loading rows
--           outside onetrip.
--           psql: psql -v k=5 -v query_embedding='[...]' -v query_text='How do I ...?' \
--                 -v query_terms='{}' -v candidates=50 -v rrf_k=60 -v dense_weight=1.0 \
--                 -v lexical_weight=0.3 -v term_weight=10.0 -v max_term_share=0.03 \
--                 -v rare_term_sections=100 -v tf_weight=0 -f retrieve_hybrid.sql
-- Settings  hnsw.ef_search (default 40) is the HNSW candidate list, and with
--           iterative scans off (the server default) it is also the most rows
--           the scan returns: the dense list holds at most 40 sections when
--           :candidates > 40. Run SET hnsw.iterative_scan = relaxed_order
--           (what onetrip's Python API sets on each connection, with
--           hnsw.max_scan_tuples = 20000) or SET hnsw.ef_search to at least :candidates.
-- Plan      On tables of a few thousand sections or more (a small table is
--           rightly read whole and sorted): dense: Index Scan using
--           sections_embedding_hnsw (Order By embedding <=> ...);
--           lexical: a Nested Loop over the query words, each a Bitmap Heap
--           Scan on sections_tsv_gin (a word's sections only), plus one on
--           sections_terms_gin; then a top-N sort by score; then index lookups.
--           Under row-level security (rls.sql) the lexical side cannot use its
--           GIN indexes for a role the policy applies to (@@ and && are not
--           leakproof): see rls.sql, Plan.
--           Oracle: hybrid mode is PostgreSQL-only (no Oracle Text edition).
-- Returns   Each section ONCE. The hits: hit_rank 1..k, ranked by
--           fused score (then distance) (ties: doc_id, sequence_index), with score.
--           The context rows (hit_rank, distance and score NULL): every hit's parent
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
-- onetrip   The Python API sends this statement with these changes: no hit_rank
--           column (it ranks the hits, the rows with a score, by the same key);
--           the dense list's HNSW scan with a constant LIMIT, the bucket of
--           retrieve.K_BUCKETS (4, 5, 8, 10, 16, 20, 50, ...) at or above
--           :candidates (not k: the hits' LIMIT :k stays a bind), then sorted by
--           distance + 0 and cut to LIMIT :candidates (the dense list can then
--           differ when the bucket exceeds hnsw.ef_search: see retrieve.sql,
--           onetrip); and the query's words
--           behind an OFFSET 0 fence and its terms in a scalar subquery (a custom
--           plan counts them and looks cheaper than the generic one, so the
--           prepared statement was planned on every call). So a prepared
--           statement keeps one generic plan.
-- =============================================================================
WITH dense AS MATERIALIZED (
    SELECT s.doc_id,
           s.section_id,
           s.embedding <=> :'query_embedding'::vector AS distance
      FROM sections s
     ORDER BY s.embedding <=> :'query_embedding'::vector
     LIMIT GREATEST(:'candidates'::integer, :'k'::integer)
),
query_words AS MATERIALIZED (
    -- The query's distinct stemmed words, each searched on its own (any word
    -- may match) and weighted by its rarity. Words found almost everywhere are
    -- skipped: in more than max_term_share of the sections and in more than
    -- rare_term_sections of them. A word term_stats does not know gets weight 1.
    -- query: the word as a one-lexeme tsquery, quoted (no second stemming).
    SELECT w.lexeme,
           coalesce(ts.idf, 1.0) AS idf,
           ('''' || replace(replace(w.lexeme, '\', '\\'), '''', '''''') || '''')::tsquery AS query
      FROM unnest(tsvector_to_array(to_tsvector('english'::regconfig, :'query_text'))) w (lexeme)
      LEFT JOIN term_stats ts
        ON ts.lexeme = w.lexeme
     WHERE ts.lexeme IS NULL
        OR ts.sections <= :'rare_term_sections'::integer
        OR ts.share <= :'max_term_share'::float8
),
lexical AS MATERIALIZED (
    -- lex_score: the summed idf of the query words a section holds (times
    -- their term frequency with tf_weight), plus term_weight when it holds an
    -- exact technical term of the query. Each weight is rounded to a multiple of
    -- 2^-20 so that the sum is exact: a float sum depends on the order of its
    -- terms, which differs between plans (custom and generic), and sections
    -- holding the same words must tie exactly, then go by key
    SELECT m.doc_id,
           m.section_id,
           sum(round(m.weight * 1048576)) / 1048576 AS lex_score
      FROM (
            SELECT s.doc_id, s.section_id,
                   -- a repeated word counts more: ts_rank's saturating term frequency,
                   -- 1 for one occurrence (0.0607927 = ts_rank of one), up to 1.64
                   w.idf * CASE WHEN :'tf_weight'::float8 > 0
                                THEN 1 + :'tf_weight'::float8 * (ts_rank(s.tsv, w.query, 0) / 0.0607927 - 1)
                                ELSE 1 END AS weight
              FROM query_words w
              JOIN sections s
                ON s.tsv @@ w.query
            UNION ALL
            SELECT s.doc_id, s.section_id, :'term_weight'::float8
              FROM sections s
             WHERE s.terms && :'query_terms'::text[]
           ) m
     GROUP BY m.doc_id, m.section_id
     ORDER BY lex_score DESC, m.doc_id, m.section_id
     LIMIT GREATEST(:'candidates'::integer, :'k'::integer)
),
fused AS (
    SELECT c.doc_id,
           c.section_id,
           sum(c.weight / (:'rrf_k'::integer + c.rank)) AS score
      FROM (
            -- d.distance + 0: the real distance order (a relaxed-order HNSW scan returns rows slightly
            -- out of it, and PostgreSQL 17+ would take them as sorted and skip this sort)
            SELECT d.doc_id, d.section_id, :'dense_weight'::float8 AS weight,
                   row_number() OVER (ORDER BY d.distance + 0, d.doc_id, d.section_id) AS rank
              FROM dense d
            UNION ALL
            SELECT l.doc_id, l.section_id, :'lexical_weight'::float8 AS weight,
                   row_number() OVER (ORDER BY l.lex_score DESC, l.doc_id, l.section_id) AS rank
              FROM lexical l
           ) c
     GROUP BY c.doc_id, c.section_id
),
hits AS MATERIALIZED (
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
           s.embedding <=> :'query_embedding'::vector AS distance,
           f.score
      FROM fused f
      JOIN sections s
        ON s.doc_id = f.doc_id
       AND s.section_id = f.section_id
     ORDER BY f.score DESC, distance, s.doc_id, s.sequence_index
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
SELECT row_number() OVER (ORDER BY h.score DESC, h.distance, h.doc_id, h.sequence_index) AS hit_rank,
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
