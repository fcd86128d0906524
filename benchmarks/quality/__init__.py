"""Answer-quality benchmark: evidence coverage and section recall at fixed token budgets.

    python -m benchmarks.quality.run --questions FILE --manual DIR [--dsn DSN] [--out DIR]

`metrics` holds the pure scoring functions (unit-tested in tests/test_quality_metrics.py),
`windows` the fixed 512-token-window baseline, `run` the driver.
"""
