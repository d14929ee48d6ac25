"""Operator tools: `rlstack doctor` walks the health chain and says what a failure likely means."""
