"""Shared parts: wire contracts, settings, metrics, logging, HTTP client and server plumbing."""
