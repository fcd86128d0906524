"""SQL identifier validation and quoting.

Identifiers (schema name, table prefix) are the only parts of onetrip's SQL that
come from configuration rather than from the templates, and they cannot be bind
parameters. So they are held to a strict pattern: lower-case ASCII letters,
digits and underscores, starting with a letter or underscore. Anything else
(quotes, semicolons, comments, spaces, upper case, Unicode look-alikes such as
a Cyrillic 'а') is refused with an error that names the value and the rule.

A valid identifier is then emitted the way PostgreSQL's own ``quote_ident()``
does: bare when that is unambiguous, double-quoted when it is a reserved word.
Bare lower-case names read like hand-written SQL in the rendered files and mean
the same thing in PostgreSQL and (upper-cased) in Oracle.
"""

from __future__ import annotations

import re

from .errors import InvalidIdentifierError

_IDENT = re.compile(r"[a-z_][a-z0-9_]*\Z")
_PREFIX = re.compile(r"(?:[a-z][a-z0-9_]*)?\Z")

#: PostgreSQL limits identifiers to 63 bytes; Oracle 23ai allows 128.
MAX_IDENTIFIER_LENGTH = 63
#: The longest derived name, "<prefix>sections_embedding_hnsw" (23 + prefix), plus the suffix Citus
#: gives shard relations ("_102008", up to 8) stays within PostgreSQL's 63 bytes.
MAX_PREFIX_LENGTH = 32

# Words reserved in PostgreSQL or Oracle that could plausibly be chosen as a
# schema name. They are refused: a schema called "select" is a footgun in both.
_RESERVED = frozenset(
    """all analyse analyze and any array as asc asymmetric both case cast check collate column
    constraint create current_catalog current_date current_role current_time current_timestamp
    current_user default deferrable desc distinct do else end except false fetch for foreign from
    grant group having in initially intersect into lateral leading limit localtime localtimestamp
    not null offset on only or order placing primary references returning select session_user
    some symmetric system_user table then to trailing true union unique user using variadic when
    where window with access audit cluster comment compress connect exclusive file identified
    immediate increment index level lock long maxextents minus mode modify noaudit nocompress
    nowait number of offline online option pctfree prior raw rename resource row rowid
    rownum rows session set share size start successful synonym sysdate trigger uid validate
    values varchar varchar2 view whenever add alter between by char current date decimal delete drop exists
    float initial insert integer mlslabel privileges revoke smallint update
    authorization binary collation concurrently cross current_schema freeze full ilike inner is
    isnull join left like natural notnull outer overlaps right similar tablesample verbose""".split()
)


def validate_identifier(name: object, what: str = "identifier") -> str:
    """Return ``name`` if it is a safe SQL identifier, else raise InvalidIdentifierError."""
    if not isinstance(name, str):
        raise InvalidIdentifierError(f"{what} must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidIdentifierError(f"{what} must not be empty")
    if len(name) > MAX_IDENTIFIER_LENGTH:
        raise InvalidIdentifierError(
            f"{what} {name[:80]!r} is {len(name)} characters; the limit is {MAX_IDENTIFIER_LENGTH}"
        )
    if not _IDENT.match(name):
        raise InvalidIdentifierError(
            f"{what} {name!r} is not allowed: use lower-case ASCII letters, digits and "
            "underscores, starting with a letter or underscore"
        )
    if name in _RESERVED:
        raise InvalidIdentifierError(f"{what} {name!r} is a reserved SQL word")
    return name


def validate_schema(name: object) -> str:
    """`validate_identifier` for a schema name, which also may not start with ``pg_``: PostgreSQL reserves that
    prefix for system schemas (CREATE SCHEMA refuses it, case-sensitively; upper case is refused here anyway), so
    ``--schema pg_foo`` had passed this check and failed at the server with ReservedName (exit 1, not 2)."""
    name = validate_identifier(name, "schema name")
    if name.startswith("pg_"):
        raise InvalidIdentifierError(f"schema name {name!r} is not allowed: PostgreSQL reserves names starting "
                                     "with 'pg_' for system schemas")
    return name


#: Reserved in Oracle only, and PostgreSQL's default schema: taken there, refused for the Oracle edition
#: (`check_oracle_identifier`). It had been refused everywhere, so tables in public could not be named.
_ORACLE_ONLY_RESERVED = frozenset({"public"})


def check_oracle_identifier(name: str, what: str = "identifier") -> str:
    """``name`` if Oracle takes it unquoted too: a nonquoted Oracle identifier must begin with a letter, and
    not be one of Oracle's reserved words (those PostgreSQL reserves too are refused everywhere)."""
    if not name[:1].isalpha():
        raise InvalidIdentifierError(
            f"{what} {name!r} cannot be written bare in Oracle, where an unquoted name begins with a letter:"
            " no Oracle edition for it"
        )
    if name in _ORACLE_ONLY_RESERVED:
        raise InvalidIdentifierError(f"{what} {name!r} is a reserved word in Oracle: no Oracle edition for it")
    return name


def validate_prefix(prefix: object) -> str:
    """Validate a table prefix (may be empty); it is glued in front of table names."""
    if not isinstance(prefix, str):
        raise InvalidIdentifierError(f"table prefix must be a string, got {type(prefix).__name__}")
    if len(prefix) > MAX_PREFIX_LENGTH:
        raise InvalidIdentifierError(
            f"table prefix {prefix[:80]!r} is {len(prefix)} characters; the limit is {MAX_PREFIX_LENGTH}"
        )
    if not _PREFIX.match(prefix):
        raise InvalidIdentifierError(
            f"table prefix {prefix!r} is not allowed: use lower-case ASCII letters, digits and "
            "underscores, starting with a letter (or an empty prefix)"
        )
    return prefix


def quote_ident(name: str) -> str:
    """Quote like PostgreSQL's quote_ident(): bare if safe, else double-quoted.

    Only ever called on validated names, so the quoted branch is defence in depth.
    """
    if _IDENT.match(name) and name not in _RESERVED:
        return name
    return '"' + name.replace('"', '""') + '"'
