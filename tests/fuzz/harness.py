"""Fuzz one live HTTP service from its own OpenAPI document with schemathesis.

Each operation gets ``examples`` generated requests that fit the schema and ``examples`` that
break it (wrong types, missing fields, out-of-range numbers, odd strings and headers), sent over
a real socket to the app served on loopback. A 500, any 5xx other than the ones a route
documents (``allowed_5xx``), or an answer slower than ``timeout`` seconds fails the test with the
request that caused it. Bounded: example counts and timeouts, no shrinking database on disk.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import hypothesis
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given
from schemathesis.generation.modes import GenerationMode


@dataclass
class Finding:
    operation: str
    mode: str
    request: str
    status: int | None
    body: str

    def __str__(self) -> str:
        return f"{self.operation} [{self.mode}]: {self.request} -> {self.status} {self.body[:300]}"


@dataclass
class FuzzReport:
    calls: int = 0
    findings: list[Finding] = field(default_factory=list)
    operations: list[str] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    """How many answers of each status: a fuzz every request of which is refused tests little."""


def fuzz(openapi: dict, base_url: str, *, examples: int = 25, timeout: float = 10.0, skip: Iterable[str] = (),
         allowed_5xx: Callable[[str, int], bool] = lambda path, status: False, headers: dict[str, str] | None = None) -> FuzzReport:
    """Fuzz every operation of ``openapi`` (``"METHOD /path"`` in ``skip`` are left out) at ``base_url``."""
    schema = schemathesis.openapi.from_dict(openapi)
    report = FuzzReport()
    skipped = set(skip)
    session = requests.Session()
    for result in schema.get_all_operations():
        operation = result.ok()
        label = f"{operation.method.upper()} {operation.path}"
        if label in skipped:
            continue
        report.operations.append(label)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _run(operation, mode, label, base_url, examples, timeout, allowed_5xx, headers, session, report)
    return report


def _run(operation, mode, label, base_url, examples, timeout, allowed_5xx, headers, session, report) -> None:  # noqa: ANN001, PLR0913
    @hypothesis.settings(max_examples=examples, deadline=None, database=None, derandomize=True, phases=[Phase.generate],
                         suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def one(case) -> None:  # noqa: ANN001
        report.calls += 1
        try:
            response = case.call(base_url=base_url, session=session, headers=headers, timeout=timeout)
        except requests.Timeout:
            report.findings.append(Finding(label, mode.value, _describe(case), None, f"no answer within {timeout} s"))
            return
        except requests.ConnectionError as exc:
            report.findings.append(Finding(label, mode.value, _describe(case), None, f"connection failed: {exc}"))
            return
        status = response.status_code
        report.statuses[status] += 1
        if status >= 500 and not allowed_5xx(operation.path, status):
            report.findings.append(Finding(label, mode.value, _describe(case), status, response.text))

    try:
        one()
    except hypothesis.errors.Unsatisfiable:
        pass  # nothing (more) to generate for this mode: e.g. no way to break a route without inputs


def _describe(case) -> str:  # noqa: ANN001
    parts = [f"{case.method.upper()} {case.formatted_path}"]
    for name in ("query", "headers", "body"):
        value = getattr(case, name, None)
        if value not in (None, {}, schemathesis.core.NOT_SET if hasattr(schemathesis, "core") else None):
            parts.append(f"{name}={value!r}"[:400])
    return " ".join(parts)
