-- =============================================================================
-- onetrip: schema.sql (PostgreSQL edition)
-- -----------------------------------------------------------------------------
-- Purpose   Tables and indexes for section-level retrieval: one row per document,
--           one row per section (the unit that is embedded and searched), with
--           the section tree (parent_section_id) and document order
--           (sequence_index) stored next to the embedding. parent_sequence_index
--           repeats the parent's sequence_index, so the retrieval query finds
--           parents and neighbors through the one (doc_id, sequence_index) index.
-- Requires  PostgreSQL 13+ (tested on 18), pgvector 0.8+ (CREATE EXTENSION vector).
-- Params    embedding dimension 384; schema (search_path);
--           table prefix ''.
-- Creates   documents      (doc_id primary key)
--           sections       (primary key (doc_id, section_id))
--           sections_doc_seq_key  unique (doc_id, sequence_index): neighbor joins
--           sections_doc_parent_idx  (doc_id, parent_section_id): child lookups
--           sections_embedding_hnsw  HNSW, vector_cosine_ops
--           sections_collection_idx  (collection): tenant filters
--           section_history  superseded revisions (audit), never searched
--           sections_tsv_gin, sections_terms_gin  GIN: hybrid (full-text) search
--           term_stats  sections per stemmed word: lexical search weights
-- Columns   collection (tenant) and acl (principals allowed to read; NULL =
--           everyone) are on every section, so filters and access checks apply
--           to each returned row, expanded ones included. revision names the
--           document revision that last wrote a section (onetrip's loader leaves
--           the rows a revision does not change in place: no new HNSW entry).
-- Words     term_stats holds lexical search's word weights. After loading rows
--           outside onetrip (COPY, INSERT), recount them and merge the GIN
--           indexes' pending entries, as `onetrip refresh-term-stats` does (the
--           merge needs the indexes' owner); until then a word the table does
--           not know is searched with weight 1:
--             BEGIN;
--             LOCK TABLE term_stats IN SHARE ROW EXCLUSIVE MODE;
--             DELETE FROM term_stats;
--             INSERT INTO term_stats (lexeme, sections, share, idf)
--             SELECT w.word, w.ndoc, w.ndoc::float8 / n.total, ln((n.total + 1.0) / w.ndoc)
--               FROM ts_stat('SELECT tsv FROM sections') w,
--                    (SELECT count(*) AS total FROM sections) n;
--             COMMIT;
--             SELECT gin_clean_pending_list('sections_tsv_gin'),
--                    gin_clean_pending_list('sections_terms_gin');
-- Re-run    Safe: every statement is IF NOT EXISTS. It never alters an existing
--           table: tables from an older onetrip keep their columns (onetrip init
--           says which are missing; `onetrip init --recreate` rebuilds them).
--           Each CREATE INDEX IF NOT EXISTS still takes its SHARE lock on the
--           table before it finds the index there, so on a live system a re-run
--           waits for open write transactions and blocks new writes meanwhile;
--           an index that is missing (say the HNSW one, dropped for a bulk load)
--           is built without CONCURRENTLY, blocking writes for the whole build:
--           on a live table create it with CREATE INDEX CONCURRENTLY first.
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
