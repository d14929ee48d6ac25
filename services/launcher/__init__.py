"""The local orchestrator behind ``rlstack up``: services as processes, started in order, stopped cleanly."""
