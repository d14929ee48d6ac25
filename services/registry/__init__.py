"""The registry: live table of inference endpoints with TTL heartbeats, probing and long-poll watch."""
