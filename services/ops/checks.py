"""One finding of ``rlstack doctor``: what was checked, whether it passed, and what to do if not."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    remedy: str = ""
