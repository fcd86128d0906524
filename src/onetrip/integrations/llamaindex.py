"""LlamaIndex retriever over onetrip: each `retrieve`/`aretrieve` is ONE SQL statement.

LlamaIndex fetches parents and neighbors (auto-merging, prev/next postprocessors)
with one docstore call each; here they come back with the hits. Install with
``pip install 'onetrip[llamaindex]'``.

    from onetrip.integrations.llamaindex import OnetripRetriever
    retriever = OnetripRetriever(dsn="postgresql://...", k=5)
    nodes = retriever.retrieve("Is tennis elbow covered?")
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeRelationship, NodeWithScore, ObjectType, QueryBundle, RelatedNodeInfo, TextNode

from ..async_retrieve import AsyncRetriever
from ..retrieve import Expansion, Filters, HybridOptions, Retriever
from . import Item, Query, shared_source

__all__ = ["OnetripRetriever", "to_node"]

# Shown to the LLM by LlamaIndex's metadata rendering, in this order; ids, ranks and distances are not.
# LlamaIndex renders metadata before the node text, so the hit's own heading path goes last, next to it.
LLM_KEYS = ("parent_heading_path", "parent_content", "prev_heading_path", "prev_content",
            "next_heading_path", "next_content", "heading_path")
_RELATIONS = {"parent": NodeRelationship.PARENT, "prev": NodeRelationship.PREVIOUS, "next": NodeRelationship.NEXT}


def to_node(item: Item) -> NodeWithScore:
    """A TextNode with id "doc_id#section_id", linked to its document, parent and neighbors."""
    relationships: dict[NodeRelationship, RelatedNodeInfo] = {
        NodeRelationship.SOURCE: RelatedNodeInfo(node_id=item.relations["source"], node_type=ObjectType.DOCUMENT)}
    for role, rel in _RELATIONS.items():
        if item.relations.get(role):
            relationships[rel] = RelatedNodeInfo(node_id=item.relations[role], node_type=ObjectType.TEXT)
    # the LLM's keys last, in LLM_KEYS order (LlamaIndex renders metadata in dict order)
    keys = [k for k in item.metadata if k not in LLM_KEYS] + [k for k in LLM_KEYS if k in item.metadata]
    node = TextNode(
        id_=item.id,
        text=item.text,
        metadata={k: item.metadata[k] for k in keys},
        relationships=relationships,
        excluded_embed_metadata_keys=keys,
        # a missing relation (None) is left out of the LLM's text rather than shown as "None"
        excluded_llm_metadata_keys=[k for k in keys if k not in LLM_KEYS or item.metadata[k] is None],
    )
    return NodeWithScore(node=node, score=item.score)


def _query_of(bundle: QueryBundle, embed: Callable[[str], Any]) -> tuple[Any, str | None]:
    """What to search for: the bundle's embedding as is, else the mean embedding of its
    ``custom_embedding_strs`` (as LlamaIndex's own vector retriever does; HyDE fills them),
    else its text. With an embedding, a non-blank query text also serves lexical/hybrid
    ranking; a blank one leaves a dense search."""
    text = bundle.query_str if bundle.query_str and bundle.query_str.strip() else None
    if bundle.embedding is not None:
        return bundle.embedding, text
    if bundle.custom_embedding_strs:
        return np.mean([embed(s) for s in bundle.custom_embedding_strs], axis=0).astype(np.float32), text
    return bundle.query_str, None


class OnetripRetriever(BaseRetriever):
    """A LlamaIndex `BaseRetriever`: top-``k`` sections with parent and neighbors, one statement.

    Give ``retriever`` (sync calls), ``async_retriever`` (async calls, never the
    sync one in a thread), or ``dsn`` (both made on first use, with ``embedder``); none of
    them: the DSN ``resolve_dsn()`` gives ($ONETRIP_DSN, else the embedded server).

    content="expanded"  node text = parent, previous, hit and next section in reading order,
                        each under its heading-path separator
    content="section"   node text = the hit's own text; related text in node metadata
                        (parent_content, prev_content, next_content; shown to the LLM before
                        the text, with the hit's heading_path last; a previous section that is
                        the parent is shown once, as parent_content)
    assembled=True      the deduplicated, ``max_tokens``-budgeted context, one node per passage
                        in reading order
    mode="auto" (default) searches hybrid (dense + full text) when the query has text, as a
    query bundle with a query string does; dense for a bare embedding.
    Score: 1 - distance in dense mode, the RRF score in hybrid/lexical mode (an assembled
    context's non-hit passages, and hybrid ones, have none).
    """

    def __init__(
        self,
        retriever: Retriever | None = None,
        async_retriever: AsyncRetriever | None = None,
        *,
        dsn: str | None = None,
        embedder: Any = None,
        schema: str | None = None,
        prefix: str = "",
        k: int = 5,
        mode: str = "auto",
        content: str = "expanded",
        assembled: bool = False,
        expand: Expansion | None = None,
        filters: Filters | dict[str, Any] | None = None,
        principals: Sequence[str] | None = None,
        max_tokens: int | None = 2000,
        hybrid: HybridOptions | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self.query = Query.build(k=k, mode=mode, content=content, assembled=assembled, expand=expand,
                                 filters=filters, principals=principals, max_tokens=max_tokens, hybrid=hybrid)
        self.source = shared_source(retriever, async_retriever, dsn, embedder=embedder, schema=schema, prefix=prefix)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query, text = _query_of(query_bundle, lambda s: self.source.sync().embedder.embed_query(s))
        return [to_node(i) for i in self.source.search(query, self.query, text)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        strs = list(query_bundle.custom_embedding_strs or []) if query_bundle.embedding is None else []
        vectors: list[Any] = []
        if strs:  # as the sync path: the embedder (and its model check) only when there is text to embed here
            r = await self.source.async_()  # its embedder in the thread: the model check embeds a probe
            vectors = await asyncio.to_thread(lambda: [r.embedder.embed_query(s) for s in strs])  # off the loop
        done = iter(vectors)
        query, text = _query_of(query_bundle, lambda s: next(done))
        return [to_node(i) for i in await self.source.asearch(query, self.query, text)]

    def close(self) -> None:
        """Close the sync connection made from ``dsn``, shared with adapters of the same dsn, schema, prefix and
        embedder (the next call of any of them opens it again); given retrievers stay open."""
        self.source.close()

    async def aclose(self) -> None:
        """Close this event loop's async connection made from ``dsn`` (shared as `close` says)."""
        await self.source.aclose()
