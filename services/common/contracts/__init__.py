"""Wire contracts: the JSON that crosses a process boundary, as pydantic models."""
