"""What the proxy sets on LiteLLM so that its per-call work stays small, each measured with
``bench/proxy_capacity.py`` (docs/performance.md#proxy-capacity-per-core).

LiteLLM's own work is most of the proxy's CPU per call; these settings remove the parts that do
nothing for a self-hosted policy, without changing what LiteLLM does with a call.
"""

from __future__ import annotations

import gc
import importlib
import sys

FREE = {"input_cost_per_token": 0.0, "output_cost_per_token": 0.0}
"""The policy costs nothing per token. Said in each deployment's ``model_info`` (registered once, when the
router takes the deployment), LiteLLM's cost tracking finds the zero price at once; unsaid, it searches its
cost map for the self-hosted name on every call and then diagnoses the zero cost (a sixth of the proxy's
CPU per call). Said in ``litellm_params`` instead, LiteLLM registers it again on every call and rebuilds
its cost-map index each time."""

GEN0_THRESHOLD = 50_000
"""Allocations between young-generation collections (Python's default: 700)."""
OTEL_LOGGER = "litellm.integrations.otel.logger"


def skip_absent_opentelemetry() -> None:
    """LiteLLM's key check imports its OpenTelemetry logger on every call, best-effort. Where that
    import fails (``opentelemetry``'s SDK is not installed; we install none) Python caches nothing and
    every call reads and compiles the module again before failing (3-4% of the proxy's CPU per call).
    Tried once here; on failure the module is marked absent, so later imports fail at once. Where it
    imports, nothing changes."""
    try:
        importlib.import_module(OTEL_LOGGER)
    except ImportError:
        sys.modules[OTEL_LOGGER] = None  # type: ignore[assignment] - None in sys.modules: "not importable"


def freeze_startup_heap() -> None:
    """Move everything alive after start-up out of the cyclic collector's reach, and collect the
    young generation less often.

    The proxy's heap after start-up is about 680k tracked objects (LiteLLM's modules, cost map,
    pydantic schemas); one full collection walks them all, 0.4 s on this machine, with the event loop
    and every call in flight stopped (measured: ``bench/proxy_capacity.py``, docs/performance.md).
    Frozen, they are never walked again; objects calls make are collected as before. A call through
    LiteLLM allocates thousands of container objects, so the default young-generation threshold
    (700) ran a collection many times per call; ``GEN0_THRESHOLD`` runs it every few calls."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, older, oldest)
