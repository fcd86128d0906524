"""Scale benchmark: load time, index size, recall and latency as the corpus grows (`python -m benchmarks.scale.run`)."""
