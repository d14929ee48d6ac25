"""Reading one sample out of a service's Prometheus text."""

from __future__ import annotations

import re


def metric(text: str, name: str) -> float | None:
    """The first sample of ``name`` (any labels) in Prometheus text; None when it is absent."""
    found = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    return float(found.group(1)) if found else None
