-- =============================================================================
-- onetrip: rls.sql (Oracle Database 23ai edition)
-- -----------------------------------------------------------------------------
-- Purpose   postgres/rls.sql's row-level security as a Virtual Private
--           Database (VPD) policy, for DBAs who want the database, not the
--           application, to decide who reads which section. A row is readable
--           when its acl is NULL (public) or names the current user or a role
--           enabled in the session (SESSION_ROLES: granted directly or through
--           other roles), as the PostgreSQL policy reads the roles the user is
--           a member of. Oracle adds the predicate to every query of the two
--           tables, so the parents, neighbors and subtrees that retrieve.sql,
--           retrieve_macro.sql and assemble.sql read are filtered as the hits
--           are: an expansion never shows a row the user may not read.
-- Requires  Oracle Database 23ai (JSON type, JSON_EXISTS ... PASSING),
--           Enterprise Edition (DBMS_RLS); the tables from schema.sql. Run as
--           the tables' owner, with CREATE PROCEDURE and EXECUTE on
--           SYS.DBMS_RLS (granted by a DBA). Unlike PostgreSQL's, the policy
--           filters the tables' owner too: only SYS and users granted EXEMPT
--           ACCESS POLICY read every row, so a loader that reads the tables
--           back (to skip unchanged documents) runs as such a user. The
--           policies cover SELECT only: a user granted INSERT, UPDATE or
--           DELETE can write and delete rows it cannot read (PostgreSQL, with
--           only FOR SELECT policies, denies those commands to every role its
--           policies apply to). Grant writes to the owner or the loader only.
--           Each DBMS_RLS call commits the session's open transaction.
--           This edition is validated by parsing (sqlglot, Oracle dialect) and
--           golden files, NOT by execution: no Oracle server was available.
-- Params    none: the principals are SYS_CONTEXT('USERENV', 'CURRENT_USER')
--           and SYS.SESSION_ROLES (schema-qualified: a predicate's names are
--           resolved as the policy function's owner), read when a query runs.
--           Oracle keeps unquoted user and role names in upper case and the
--           comparison is exact (as in PostgreSQL): an acl names them as the
--           data dictionary spells them, '["HR"]', not '["hr"]'. Only SQL
--           NULL is public: an acl of '[]' (as an empty array in PostgreSQL)
--           or JSON null is readable by no one. In a definer's-rights
--           procedure the current user is its owner and roles are disabled,
--           as PostgreSQL's current_user is a SECURITY DEFINER function's
--           owner.
-- Policy    acl_read_predicate returns one predicate text for every caller
--           and both tables, so the policies are STATIC: Oracle calls it once
--           per policy and caches the text; the user and the roles in it are
--           read by each query, never cached. Re-run: safe, each policy is
--           dropped (ORA-28102, "policy does not exist", ignored) and added.
-- Plan      Expected, not observed: the predicate joins the WHERE of every
--           query block reading sections or documents; for FETCH APPROX
--           the optimizer filters the vector search's candidates by it (pre-
--           or in-filtering, its choice, as for any WHERE on the search), and
--           each row it checks with an acl runs the EXISTS over SESSION_ROLES,
--           one JSON_EXISTS per enabled role. V$VPD_POLICY shows the predicate
--           each cursor got.
-- Usage     GRANT SELECT ON documents TO app_role;
--           GRANT SELECT ON sections TO app_role;
--           Set an ACL on both tables (the documents row holds the title,
--           source and metadata):
--           UPDATE documents SET acl = JSON('["HR"]') WHERE doc_id = 'salaries.md';
--           UPDATE sections SET acl = JSON('["HR"]') WHERE doc_id = 'salaries.md';
--           Oracle parses the predicate when a query first uses it, not when
--           the policy is added: check it once after this file, as a user the
--           policy applies to (a broken predicate fails every query, ORA-28113):
--           SELECT count(*) FROM sections;
-- =============================================================================
CREATE OR REPLACE FUNCTION acl_read_predicate (
    object_schema IN VARCHAR2,
    object_name   IN VARCHAR2
) RETURN VARCHAR2
IS
BEGIN
    RETURN q'~acl IS NULL
    OR JSON_EXISTS(acl, '$[*]?(@ == $p)' PASSING SYS_CONTEXT('USERENV', 'CURRENT_USER') AS "p")
    OR EXISTS (SELECT 1
                 FROM sys.session_roles r
                WHERE JSON_EXISTS(acl, '$[*]?(@ == $p)' PASSING r.role AS "p"))~';
END;
/

DECLARE
    policy_missing EXCEPTION;
    PRAGMA EXCEPTION_INIT(policy_missing, -28102);

    -- one table's policy, dropped first so that the file can be run again
    PROCEDURE protect(table_name IN VARCHAR2, policy_name IN VARCHAR2) IS
    BEGIN
        BEGIN
            DBMS_RLS.DROP_POLICY(object_schema => SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA'),
                                 object_name   => table_name,
                                 policy_name   => policy_name);
        EXCEPTION
            WHEN policy_missing THEN
                NULL;  -- the first run
        END;
        DBMS_RLS.ADD_POLICY(object_schema   => SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA'),
                            object_name     => table_name,
                            policy_name     => policy_name,
                            function_schema => SYS_CONTEXT('USERENV', 'CURRENT_SCHEMA'),
                            policy_function => 'ACL_READ_PREDICATE',
                            statement_types => 'SELECT',
                            policy_type     => DBMS_RLS.STATIC);
    END;
BEGIN
    protect('SECTIONS', 'SECTIONS_ACL_READ');
    protect('DOCUMENTS', 'DOCUMENTS_ACL_READ');
END;
/
