"""Scripts run under .venv-atropos: atroposlib's own clients driven against our batcher."""
