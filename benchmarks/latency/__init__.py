"""Latency benchmark: onetrip's one statement against multi-call retrieval, under added network RTT.

    python -m benchmarks.latency.run --sizes 10000 [--out DIR]

`run` the driver, `variants` the strategies A-H, `delay_proxy` the user-space RTT proxy, `corpus` the clustered
synthetic corpora, `report` tables and plots, `cost_split` and `many_queries` two focused comparisons,
`llamaindex_peer` the real peer (variant E).
"""
