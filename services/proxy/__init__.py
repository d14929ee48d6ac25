"""The proxy: the real LiteLLM proxy plus discovery, trial identity, the streaming shim and the trajectory logger."""
