"""The batcher: Atropos-compatible trajectory API with a write-ahead log, backpressure and staleness."""
