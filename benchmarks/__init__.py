"""Benchmarks, each a `python -m benchmarks...` command writing JSON, Markdown and PNG under results/.

`latency` (one statement vs multi-call retrieval under added RTT; `latency.delay_proxy` is the RTT proxy),
`quality` (evidence coverage on the PostgreSQL manual), `scale` (size, recall and latency as the corpus grows),
`ingest_manual` (where ingest time goes), `load_http` (the HTTP service under concurrent load).
"""
