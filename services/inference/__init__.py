"""Inference replicas: launch vLLM with the RL flags, register in the registry, heartbeat, deregister."""
