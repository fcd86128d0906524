"""LangChain retriever over onetrip: each `invoke`/`ainvoke` is ONE SQL statement.

LangChain's own parent-document and neighbor patterns fetch related chunks in
extra calls; here the hits, their parents and neighbors (or a whole budgeted
context) come back together. Install with ``pip install 'onetrip[langchain]'``.

    from onetrip.integrations.langchain import OnetripRetriever
    retriever = OnetripRetriever(dsn="postgresql://...", k=5)
    docs = retriever.invoke("Is tennis elbow covered?")
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr

from ..async_retrieve import AsyncRetriever
from ..retrieve import Filters, Retriever, as_hybrid
from . import Item, Query, Source, shared_source

__all__ = ["OnetripRetriever", "to_document"]

#: The fields that shape a search (not a connection): settable per adapter or per call.
SEARCH_FIELDS = ("k", "mode", "content", "assembled", "expand", "filters", "principals", "max_tokens", "hybrid")
#: Keywords LangChain's own invoke reads and still passes on: not search options.
LANGCHAIN_KEYS = ("verbose",)


def to_document(item: Item) -> Document:
    return Document(id=item.id, page_content=item.text, metadata=item.metadata)


class OnetripRetriever(BaseRetriever):
    """A LangChain `BaseRetriever`: top-``k`` sections with parent and neighbors, one statement.

    Give ``retriever`` (sync calls), ``async_retriever`` (async calls; never the
    sync one in a thread), or ``dsn`` (both made on first use, with ``embedder``); none of
    them: the DSN ``resolve_dsn()`` gives ($ONETRIP_DSN, else the embedded server).

    content="expanded"  page_content = parent, previous, hit and next section in reading
                        order, each under its heading-path separator (what a prompt wants)
    content="section"   page_content = the hit's own text; related text in metadata
                        (parent_content, prev_content, next_content; prev_content is None
                        when the previous section is the parent, whose text is parent_content)
    assembled=True      the deduplicated, ``max_tokens``-budgeted context of `Retriever.assemble`,
                        one Document per passage in reading order
    mode="auto" (default) searches hybrid (dense + full text): a LangChain query always has its text.
    hybrid: used by hybrid and lexical searches; with mode="dense" (the field's or a call's) it is unused.
    Metadata: doc_id, section_id, sequence_index, heading_path, anchor, revision, distance,
    score (1 - distance in dense mode, the RRF score in hybrid/lexical; an assembled context's
    non-hit passages, and hybrid ones, have none), rank, and parent/prev/next_section_id (roles,
    best_rank, doc_rank when assembled).
    Every field may be changed after construction (``retriever.k = 2``, ``model_copy(update=...)``)
    and applies on the next call: the search fields (k, mode, content, assembled, expand, filters,
    principals, max_tokens, hybrid) are validated then, and new connection fields (retriever,
    async_retriever, dsn, embedder, db_schema, prefix) make a new `Source` (a copy that keeps the
    old ones keeps sharing the old one). The search fields may also be given to one call,
    ``invoke(query, k=2, filters={...})``; other options are refused (a TypeError). Adapters
    made from the same dsn, db_schema, prefix and embedder share one model and connection
    (LangChain's ``configurable_fields`` makes an adapter per call).
    """

    # extra: a misspelt keyword (principal=, schema=) or JSON config key had been dropped, so principal=[...]
    # made a trusted caller with no access check; hide_input_in_errors: a bad option's error had shown the
    # constructor's whole input, the DSN's password in it (pydantic's e.errors() still holds the input)
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    # connections and a model: left out of model_dump()/model_dump_json(), shared by deep copies
    retriever: Retriever | None = Field(None, exclude=True)
    async_retriever: AsyncRetriever | None = Field(None, exclude=True)
    dsn: str | None = Field(None, repr=False)  # it may hold a password: kept out of repr() and to_json()'s repr
    embedder: Any = Field(None, exclude=True)
    db_schema: str | None = None
    prefix: str = ""
    k: int = Field(5, strict=True)  # strict: onetrip refuses k=True or "3", pydantic would coerce them
    mode: Literal["auto", "dense", "lexical", "hybrid"] = "auto"
    content: Literal["section", "expanded"] = "expanded"
    assembled: bool = Field(False, strict=True)
    # Typed Any so pydantic does not coerce them: a dict with a misspelt filter key must fail
    # loudly in onetrip's validation, not turn into an empty (unfiltered) Filters.
    expand: Any = None        # Expansion | None
    filters: Any = None       # Filters | dict | None
    principals: Any = None    # Sequence[str] | None: shortcut for Filters.principals
    max_tokens: int | None = Field(2000, strict=True)
    hybrid: Any = None        # HybridOptions | None

    _query: Query = PrivateAttr()
    _built_from: tuple = PrivateAttr(default=())
    _source: Source = PrivateAttr()
    _source_from: tuple = PrivateAttr(default=())

    def _search_fields(self) -> tuple:
        return tuple(getattr(self, name) for name in SEARCH_FIELDS)

    def _current_query(self) -> Query:
        """The Query for the fields as they are now: rebuilt (and validated) when one was changed."""
        fields = self._search_fields()
        if fields != self._built_from:
            values = dict(zip(SEARCH_FIELDS, fields))
            if values["mode"] == "dense" and values["hybrid"] is not None:
                # unused by a dense search, kept: configurable_fields(mode=...) rebuilds the adapter with its other
                # fields, so refusing them made a dense call of an adapter with hybrid options a ValidationError.
                # Still checked, so a misspelt option fails here, not at a later call's lexical search
                as_hybrid(values["hybrid"])
                values["hybrid"] = None
            self._query = Query.build(**values)
            # a copy: the fields' own dicts and lists, kept, changed with them in place (lc.filters["doc_ids"] =
            # ..., lc.principals.remove(...)), so the old Query, old ACL included, had stayed in use
            self._built_from = copy.deepcopy(fields)
        return self._query

    def _connection_fields(self) -> tuple:
        return (self.retriever, self.async_retriever, self.dsn, self.embedder, self.db_schema, self.prefix)

    def _current_source(self) -> Source:
        """The Source for the connection fields as they are now: a new one when one was replaced."""
        fields = self._connection_fields()
        if len(fields) != len(self._source_from) or not all(
                a is b or (isinstance(a, str) and a == b) for a, b in zip(fields, self._source_from)):
            self._source = shared_source(self.retriever, self.async_retriever, self.dsn, embedder=self.embedder,
                                         schema=self.db_schema, prefix=self.prefix)
            self._source_from = fields
        return self._source

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._current_query()  # bad options fail here, at construction
        self._current_source()

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> OnetripRetriever:
        """pydantic's deep copy (``copy.deepcopy``, ``model_copy(deep=True)``), sharing the connection fields
        (retriever, async_retriever, embedder), as the fields' comment says: a caller's own embedder was
        copied, so the copy made a second Source and connection, and one holding a lock or a client could not
        be copied at all (TypeError: cannot pickle '_thread.lock'). Found by review."""
        memo = {} if memo is None else memo
        for shared in (self.retriever, self.async_retriever, self.embedder):
            if shared is not None:
                memo[id(shared)] = shared
        return super().__deepcopy__(memo)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> OnetripRetriever:
        """pydantic's copy, refusing unknown ``update`` keys: it writes them unchecked, so ``principal=[...]``
        (for principals) had made a copy with no access check."""
        self._check_update("model_copy", update)
        return super().model_copy(update=update, deep=deep)

    def copy(self, *args: Any, update: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:  # type: ignore[override]
        """pydantic v1's (deprecated) copy, checked as `model_copy`: it writes ``update`` unchecked too. Its
        deprecation warning is raised here, pinned to the caller's line as pydantic's own is."""
        from pydantic.warnings import PydanticDeprecatedSince20

        warnings.warn("The `copy` method is deprecated; use `model_copy` instead. See the docstring of "
                      "`BaseModel.copy` for details about how to handle `include` and `exclude`.",
                      category=PydanticDeprecatedSince20, stacklevel=2)
        self._check_update("copy", update)
        with warnings.catch_warnings():  # pydantic's, which would now point at this line
            warnings.simplefilter("ignore", PydanticDeprecatedSince20)
            return super().copy(*args, update=update, **kwargs)  # type: ignore[arg-type]

    def _check_update(self, how: str, update: Mapping[str, Any] | None) -> None:
        unknown = sorted(set(update or {}) - set(type(self).model_fields))
        if unknown:
            raise TypeError(f"{how}(update=...) got unknown field(s) {unknown}; the fields are "
                            f"{sorted(type(self).model_fields)}")

    @property
    def source(self) -> Source:
        """The onetrip retrievers in use (``source.sync().conn`` is the sync connection)."""
        return self._current_source()

    def _query_for_call(self, options: dict[str, Any]) -> Query:
        """The Query for one call: the fields, with the search options given to ``invoke`` in their place.

        Filters only narrow: a call's filters are added to the adapter's, and a filter (principals
        included) the adapter already sets cannot be replaced by a call, so an application that passes
        a user's options to ``invoke`` cannot widen what the adapter may read.
        """
        options = {k: v for k, v in options.items() if k not in LANGCHAIN_KEYS}
        if not options:
            return self._current_query()
        unknown = set(options) - set(SEARCH_FIELDS)
        if unknown:  # refused, not dropped: a misspelt filter must not become an unfiltered search
            raise TypeError(f"unexpected options {sorted(unknown)} for invoke; per-call options: "
                            f"{', '.join(SEARCH_FIELDS)}")
        base = self._current_query().filters or Filters()
        call = Query.build(filters=options.pop("filters", None), principals=options.pop("principals", None)).filters
        merged = {f.name: getattr(base, f.name) for f in dataclasses.fields(Filters)}
        for name, value in ({} if call is None else dataclasses.asdict(call)).items():
            if value is None:
                continue
            if merged[name] is not None:
                raise ValueError(f"this adapter already sets filters.{name}; a call may add filters, not replace one")
            merged[name] = value
        fields = {name: getattr(self, name) for name in SEARCH_FIELDS if name not in ("filters", "principals")}
        if options.get("mode", self.mode) == "dense" and "hybrid" not in options:
            # the adapter's fusion and word-weight options do not apply to a dense search, the call's or the
            # adapter's own (a lexical one reads them), as in _current_query: kept, they had refused
            # invoke(q, mode="dense"), and invoke(q, k=1) of an adapter made dense. Found by reviews
            fields["hybrid"] = None
        return Query.build(**(fields | options), filters=Filters(**merged))

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                **options: Any) -> list[Document]:
        return [to_document(i) for i in self._current_source().search(query, self._query_for_call(options))]

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       **options: Any) -> list[Document]:
        return [to_document(i) for i in await self._current_source().asearch(query, self._query_for_call(options))]

    def close(self) -> None:
        """Close the sync connection made from ``dsn``, shared with adapters of the same dsn, schema, prefix and
        embedder (the next call of any of them opens it again); given retrievers stay open."""
        self._source.close()

    async def aclose(self) -> None:
        """Close this event loop's async connection made from ``dsn`` (shared as `close` says)."""
        await self._source.aclose()
