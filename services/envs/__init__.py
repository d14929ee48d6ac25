"""Environment servers: produce rollouts through the proxy, score them, post groups to the batcher."""
