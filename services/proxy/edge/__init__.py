"""What an agent talks to: the ASGI layer before LiteLLM (trial paths, keys, bodies, model names,
max_tokens, count_tokens) and the server-sent events a streaming caller gets back."""
