-- =============================================================================
-- onetrip: rls.sql (PostgreSQL edition)
-- -----------------------------------------------------------------------------
-- Purpose   Row-level security for DBAs who want the database, not the
--           application, to enforce who reads which section. A row is readable
--           when its acl is NULL (public) or names a role the current user is a
--           member of (directly or through groups). Because the retrieval query
--           reads parents and neighbors from the same table, RLS filters those
--           rows too: an expansion can never show a row the role may not read.
--           It returns what onetrip's Filters(principals=...) returns for the
--           role's principals, except where a query must see a row it may not
--           return: assemble's neighbor_scope = 'parent' ends the parent's
--           window at the next section no deeper than the parent, and when
--           the role may not read that section the window runs on into the
--           next one (readable rows only); and the document expansion needs
--           the documents row, which the policy hides when the
--           document's acl excludes the role, even if some of its sections
--           (an acl of their own) are readable.
-- Requires  PostgreSQL 13+ (tested on 18); tables from schema.sql. Run as the
--           tables' owner. Owners and superusers bypass RLS (add FORCE ROW
--           LEVEL SECURITY if the owner must be filtered too); application roles
--           need SELECT on both tables, and on term_stats for lexical and
--           hybrid search (word counts only, no policy). section_history
--           (archived revisions) gets no policy: grant it to auditors only.
-- Params    none: principals are the current role and every role it belongs to,
--           from pg_roles / pg_has_role(..., 'MEMBER'). Every name in the
--           function's body is qualified (pg_catalog.): the body is parsed
--           with the caller's search_path, where a temporary view named
--           pg_roles (any role may create one) would otherwise stand in for
--           the catalog's and name every role.
-- Re-run    Safe, in one transaction: no reader sees a table between its DROP
--           POLICY and CREATE POLICY. ALTER TABLE and the policies take ACCESS
--           EXCLUSIVE locks on both tables, so the run waits for queries
--           already running and blocks new ones until it commits.
-- Plan      For a role the policy applies to (not the owner):
--           - every scan of sections gets the filter, and the HNSW scan
--             filters after the index: enable iterative scans (SET
--             hnsw.iterative_scan = relaxed_order) to still get K rows;
--           - the filter calls current_principals() once per row it
--             checks (a scan of pg_roles): ~10 us a row with 20 roles, so an
--             iterative scan that filters thousands of rows pays milliseconds;
--           - hybrid and lexical search lose their GIN indexes: tsv @@ query
--             and terms && ... are not leakproof, so PostgreSQL checks the
--             policy first and cannot make them index conditions (measured on
--             10,000 sections: 3.5 ms as the owner, 354 ms as an application
--             role, Seq Scans; another run, on 20,000 sections with fewer
--             roles, 2.5 against 28 ms: the cost grows with the rows the Seq
--             Scan checks and the roles each check reads). A superuser may mark the two functions
--             LEAKPROOF (ALTER FUNCTION ts_match_vq(tsvector, tsquery)
--             LEAKPROOF; ALTER FUNCTION arrayoverlap(anyarray, anyarray)
--             LEAKPROOF), a security decision: it promises they reveal
--             nothing through errors. Or filter by ACL in the application
--             (onetrip's principals) instead of RLS for hybrid search.
-- Usage     GRANT USAGE ON SCHEMA <schema> TO app_role;  -- outside public
--           GRANT SELECT ON documents, sections, term_stats TO app_role;
--           Set an ACL on both tables (the documents row holds the title,
--           source and metadata), as `onetrip ingest --acl hr` does:
--           UPDATE documents SET acl = ARRAY['hr'] WHERE doc_id = 'salaries.md';
--           UPDATE sections SET acl = ARRAY['hr'] WHERE doc_id = 'salaries.md';
-- =============================================================================
BEGIN;

CREATE OR REPLACE FUNCTION current_principals()
RETURNS text[]
LANGUAGE sql
STABLE
AS $function$
    SELECT pg_catalog.array_agg(r.rolname::pg_catalog.text)
      FROM pg_catalog.pg_roles r
     WHERE pg_catalog.pg_has_role(current_user, r.oid, 'MEMBER')
$function$;

ALTER TABLE sections ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS sections_acl_read ON sections;

CREATE POLICY sections_acl_read ON sections
    FOR SELECT
    USING (acl IS NULL OR acl && current_principals());

ALTER TABLE documents ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS documents_acl_read ON documents;

CREATE POLICY documents_acl_read ON documents
    FOR SELECT
    USING (acl IS NULL OR acl && current_principals());

COMMIT;
