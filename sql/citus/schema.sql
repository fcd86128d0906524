-- =============================================================================
-- onetrip: schema.sql (Citus edition)
-- -----------------------------------------------------------------------------
-- Purpose   onetrip's tables on a Citus cluster: documents and sections
--           distributed by doc_id and colocated, so every parent/neighbor join of
--           the retrieval query (each one carries doc_id) runs inside one shard
--           group, and each shard has its own HNSW index.
-- Requires  Citus 12.1 (PostgreSQL 14-16) or Citus 13 (PostgreSQL 15-17), with
--           pgvector 0.8+ installed on the coordinator AND every worker
--           (CREATE EXTENSION vector is propagated).
--           VALIDATED BY PARSING (sqlglot) AND ON HASH-PARTITIONED TABLES (the
--           same doc_id-local query shape, tested), NOT ON A LIVE CLUSTER: Citus
--           cannot be installed on the machines this was built on.
-- Query     sql/postgres/retrieve.sql and retrieve_hybrid.sql are meant to run
--           unchanged. NOT expected to: assemble.sql with section or ancestors
--           expansion (a recursive CTE across documents; Citus runs recursive
--           CTEs in single-shard queries only) and the retrieve_many*.sql files
--           (a LATERAL top-k per query, correlated on a column other than
--           doc_id). How retrieve.sql would run:
--           - the hits CTE (ORDER BY embedding <=> q LIMIT k) is pushed down to
--             every shard (a per-shard HNSW scan with its own LIMIT k) and the
--             coordinator merges the per-shard top-k into the global top-k;
--           - the materialized hits become an intermediate result that Citus
--             ships to the workers, where the parent/prev/next joins run against
--             the colocated shard by doc_id (no cross-shard join);
--           - session settings do NOT reach the workers. Set pgvector's GUCs
--             where the scans run: ALTER DATABASE ... SET on every node
--             (SELECT run_command_on_workers(...)), or per transaction with
--             SET LOCAL and citus.propagate_set_commands = 'local'.
-- Params    embedding dimension 384; shard count from citus.shard_count.
-- =============================================================================
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE IF NOT EXISTS documents (
    doc_id            text NOT NULL,
    source_uri        text NOT NULL,
    title             text,
    revision          integer DEFAULT 1 NOT NULL,
    content_hash      text NOT NULL,
    collection        text DEFAULT 'default' NOT NULL,
    acl               text[],
    metadata          jsonb DEFAULT '{}' NOT NULL,
    token_count       integer DEFAULT 0 NOT NULL,
    section_count     integer DEFAULT 0 NOT NULL,
    ingested_at       timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT documents_pkey PRIMARY KEY (doc_id)
);

CREATE TABLE IF NOT EXISTS sections (
    doc_id            text NOT NULL,
    section_id        text NOT NULL,
    parent_section_id text,
    sequence_index    integer NOT NULL,
    parent_sequence_index integer,
    heading_level     smallint NOT NULL,
    heading           text,
    heading_path      text[] DEFAULT '{}' NOT NULL,
    anchor            text,
    content           text NOT NULL,
    token_count       integer NOT NULL,
    context_tokens    integer NOT NULL,
    revision          integer DEFAULT 1 NOT NULL,
    collection        text DEFAULT 'default' NOT NULL,
    acl               text[],
    embedding         vector(384) NOT NULL,
    metadata          jsonb DEFAULT '{}' NOT NULL,
    path_text         text DEFAULT '' NOT NULL,
    terms             text[] DEFAULT '{}' NOT NULL,
    tsv               tsvector GENERATED ALWAYS AS
                          (to_tsvector('english'::regconfig, path_text || ' ' || content)) STORED,
    CONSTRAINT sections_pkey PRIMARY KEY (doc_id, section_id),
    CONSTRAINT sections_doc_id_fkey FOREIGN KEY (doc_id)
        REFERENCES documents (doc_id) ON DELETE CASCADE
);

CREATE UNIQUE INDEX IF NOT EXISTS sections_doc_seq_key
    ON sections (doc_id, sequence_index);

CREATE INDEX IF NOT EXISTS sections_doc_parent_idx
    ON sections (doc_id, parent_section_id);

CREATE INDEX IF NOT EXISTS sections_collection_idx
    ON sections (collection);

CREATE INDEX IF NOT EXISTS sections_embedding_hnsw
    ON sections USING hnsw (embedding vector_cosine_ops)
    WITH (m = 16, ef_construction = 64);

-- Lexical side of hybrid search: stemmed full text (heading path + content) and
-- the exact technical terms (max_connections, pg_stat_activity) that a text
-- search configuration would split at the underscore.
CREATE INDEX IF NOT EXISTS sections_tsv_gin
    ON sections USING gin (tsv);

CREATE INDEX IF NOT EXISTS sections_terms_gin
    ON sections USING gin (terms);

-- How many sections contain each stemmed word of tsv: lexical search skips the
-- words found almost everywhere and weights the others by rarity (idf).
-- Recounted from the sections after every ingest run (onetrip's
-- store.refresh_term_stats, CLI `onetrip refresh-term-stats`); a word missing
-- here is searched with weight 1. A row whose lexeme is '' says the counts are
-- behind: an ingest run writes it before its first document and its recount
-- deletes it, so a run stopped in between has the next one recount (no query
-- word is '', so no search reads it).
CREATE TABLE IF NOT EXISTS term_stats (
    lexeme            text NOT NULL,
    sections          integer NOT NULL,           -- sections whose tsv holds the word
    share             double precision NOT NULL,  -- sections / all sections
    idf               double precision NOT NULL,  -- ln((all sections + 1) / sections)
    CONSTRAINT term_stats_pkey PRIMARY KEY (lexeme)
);

-- Superseded revisions, kept only when a document is re-ingested with
-- keep_history (audit); `onetrip prune` empties them. Never searched.
CREATE TABLE IF NOT EXISTS section_history (
    LIKE sections INCLUDING DEFAULTS,
    archived_at       timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT section_history_pkey PRIMARY KEY (doc_id, revision, section_id)
);


SELECT create_distributed_table('documents', 'doc_id');

SELECT create_distributed_table('sections', 'doc_id', colocate_with => 'documents');

SELECT create_distributed_table('section_history', 'doc_id', colocate_with => 'documents');

-- Small and read by every lexical search: a copy on every node.
SELECT create_reference_table('term_stats');

-- pgvector settings on the workers, where the HNSW scans run (replace the
-- database name; run once per database):
--   SELECT run_command_on_workers('ALTER DATABASE onetrip SET hnsw.ef_search = 100')
--   SELECT run_command_on_workers('ALTER DATABASE onetrip SET hnsw.iterative_scan = relaxed_order')
