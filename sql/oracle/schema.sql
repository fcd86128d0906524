-- =============================================================================
-- onetrip: schema.sql (Oracle Database 23ai edition)
-- -----------------------------------------------------------------------------
-- Purpose   Tables and indexes for section-level retrieval: one row per document,
--           one row per section (the unit that is embedded and searched), with
--           the section tree (parent_section_id) and document order
--           (sequence_index) stored next to the embedding. parent_sequence_index
--           repeats the parent's sequence_index, so the retrieval query finds
--           parents and neighbors through the one (doc_id, sequence_index) index.
-- Requires  Oracle Database 23ai (23.4+, COMPATIBLE 23.4.0 or higher): VECTOR
--           type, vector indexes, JSON type, CREATE TABLE/INDEX IF NOT EXISTS.
--           A Vector Pool for the HNSW graph: VECTOR_MEMORY_SIZE sized with
--           DBMS_VECTOR.INDEX_VECTOR_MEMORY_ADVISOR (without it the index build
--           fails, ORA-51962). Privileges: CREATE TABLE (DB_DEVELOPER_ROLE has
--           it) and a quota on the default tablespace, which that role does not
--           give (ALTER USER ... QUOTA UNLIMITED ON <tablespace>, by a DBA;
--           without it the first insert fails, ORA-01950).
--           This file creates sections_embedding_hnsw last, on the empty
--           table. For a bulk load, leave that statement out, load, then run
--           it (or load and then rebuild the index): rows added after an HNSW
--           index is built go to its journal and are searched exactly until
--           the graph is repopulated.
--           Oracle stores '' as NULL: content and heading are NULL for
--           heading-only sections and the preface (read NULL as empty).
--           VARCHAR2(n CHAR) counts characters, but under the default
--           MAX_STRING_SIZE = STANDARD a value still holds at most 4,000
--           bytes: a long non-ASCII title or heading needs EXTENDED.
--           This edition is validated by parsing (sqlglot, Oracle dialect) and
--           golden files, NOT by execution: no Oracle server was available.
-- Params    embedding dimension 384; schema (CURRENT_SCHEMA);
--           table prefix ''.
-- Creates   documents      (doc_id primary key)
--           sections       (primary key (doc_id, section_id))
--           sections_doc_seq_key  unique (doc_id, sequence_index): neighbor joins
--           sections_doc_parent_idx  (doc_id, parent_section_id): child lookups
--           sections_embedding_hnsw  in-memory neighbor graph, COSINE
--           sections_collection_idx  (collection): tenant filters
--           (hybrid full-text search is PostgreSQL-only: no Oracle Text index here)
-- Columns   collection (tenant) and acl (principals allowed to read; NULL =
--           everyone) are on every section, so filters and access checks apply
--           to each returned row, expanded ones included. revision names the
--           document revision that last wrote a section.
-- Re-run    Safe: every table and B-tree index statement is IF NOT EXISTS.
--           CREATE VECTOR INDEX has no IF NOT EXISTS in Oracle's documented
--           syntax, so on a re-run that last statement fails with ORA-00955
--           (name already used) and changes nothing. It never alters an
--           existing table: tables from an older onetrip keep their columns
--           (`onetrip init --recreate` rebuilds them).
-- =============================================================================
CREATE TABLE IF NOT EXISTS documents (
    doc_id            VARCHAR2(512 CHAR) NOT NULL,
    source_uri        VARCHAR2(4000 CHAR) NOT NULL,
    title             VARCHAR2(4000 CHAR),
    revision          NUMBER(10) DEFAULT 1 NOT NULL,
    content_hash      VARCHAR2(512 CHAR) NOT NULL,
    collection        VARCHAR2(512 CHAR) DEFAULT 'default' NOT NULL,
    acl               JSON,
    metadata          JSON DEFAULT '{}' NOT NULL,
    token_count       NUMBER(10) DEFAULT 0 NOT NULL,
    section_count     NUMBER(10) DEFAULT 0 NOT NULL,
    ingested_at       TIMESTAMP WITH TIME ZONE DEFAULT SYSTIMESTAMP NOT NULL,
    CONSTRAINT documents_pkey PRIMARY KEY (doc_id)
);

CREATE TABLE IF NOT EXISTS sections (
    doc_id            VARCHAR2(512 CHAR) NOT NULL,
    section_id        VARCHAR2(512 CHAR) NOT NULL,
    parent_section_id VARCHAR2(512 CHAR),
    sequence_index    NUMBER(10) NOT NULL,
    parent_sequence_index NUMBER(10),
    heading_level     NUMBER(5) NOT NULL,
    heading           VARCHAR2(4000 CHAR),
    heading_path      JSON DEFAULT '[]' NOT NULL,
    anchor            VARCHAR2(512 CHAR),
    content           CLOB,
    token_count       NUMBER(10) NOT NULL,
    context_tokens    NUMBER(10) NOT NULL,
    revision          NUMBER(10) DEFAULT 1 NOT NULL,
    collection        VARCHAR2(512 CHAR) DEFAULT 'default' NOT NULL,
    acl               JSON,
    embedding         VECTOR(384, FLOAT32) NOT NULL,
    metadata          JSON DEFAULT '{}' NOT NULL,
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

CREATE VECTOR INDEX sections_embedding_hnsw
    ON sections (embedding)
    ORGANIZATION INMEMORY NEIGHBOR GRAPH
    DISTANCE COSINE
    WITH TARGET ACCURACY 95
    PARAMETERS (TYPE HNSW, NEIGHBORS 16, EFCONSTRUCTION 64);
