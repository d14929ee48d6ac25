"""Which chart value becomes which setting of which service: one table, read by ``rlstack dryrun``
for a values file and checked against the chart's own rendering by its tests
(tests/k8s/test_chart_settings.py), so the two cannot drift apart.

The chart passes each of these values to its container as the setting's env var
(``RLSTACK_<SERVICE>_<FIELD>``); a component's ``env:`` block wins over the value, as in the chart.
A value left null is the setting's "off" (``null`` in the env var, None in the settings model);
the settings that have an off say so in the row.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.fields import FieldInfo

from rlstack.common.setting_names import env_name
from rlstack.launcher.settings_models import setting_text, settings_class

MISSING = object()


class ChartSetting(BaseModel):
    """One chart value, one service's setting."""

    model_config = ConfigDict(frozen=True)

    value: str
    """The dotted path in the values file (``trainer.packTokens``)."""
    module: str
    """The service whose container gets it (``rlstack.trainer``)."""
    field: str
    """Its path in that service's settings model (``packing.row_tokens``)."""
    example: Any
    """A value other than the setting's default, for the chart's test."""
    off: bool = False
    """Null in the values turns the setting off (None); else a null value leaves the service's default."""

    def field_info(self) -> FieldInfo:
        """The setting's declaration in its settings model (a group's field through the group)."""
        model: Any = settings_class(self.module)
        *groups, leaf = self.field.split(".")
        for group in groups:
            model = model.model_fields[group].annotation
        return model.model_fields[leaf]

    def read(self, settings: Any) -> Any:  # noqa: ANN401 - a service's settings, a setting's value
        for part in self.field.split("."):
            settings = getattr(settings, part)
        return settings

    def env_var(self) -> str:
        return env_name(settings_class(self.module).model_config.get("env_prefix", ""), self.field)


def _rows(module: str, *rows: tuple[str, str, Any] | tuple[str, str, Any, bool]) -> tuple[ChartSetting, ...]:
    return tuple(ChartSetting(value=r[0], field=r[1], example=r[2], off=len(r) > 3 and r[3], module=module) for r in rows)


CHART_SETTINGS: tuple[ChartSetting, ...] = (
    *_rows("rlstack.registry", ("registry.port", "port", 8111), ("registry.watchPods", "kube_watch_pods", True)),
    *_rows("rlstack.batcher", ("batcher.port", "port", 8011)),
    *_rows("rlstack.proxy", ("proxy.port", "port", 4011), ("proxy.workers", "workers", 3)),
    *_rows("rlstack.inference", ("inference.port", "port", 8211), ("inference.vllmPort", "vllm_port", 8311),
           ("inference.device", "device", "cuda"), ("inference.tensorParallelSize", "tensor_parallel_size", 2),
           ("model.servedName", "served_model_name", "my-policy"), ("model.family", "model_family", "qwen3")),
    *_rows("rlstack.trainer", ("trainer.port", "port", 8411), ("model.servedName", "served_model_name", "my-policy"),
           ("trainer.packTokens", "packing.row_tokens", 2048),
           ("trainer.sharePrefix", "packing.share_prefix", 32, True), ("trainer.learningRate", "optimisation.lr", 3e-05),
           ("trainer.batchSize", "batch_size", 16), ("trainer.evalEvery", "evaluation.every", 5)),
    *_rows("rlstack.envs", ("sandboxes.reaper.enabled", "sandbox.reaper", True), ("sandboxes.reaper.ttlSeconds", "sandbox.ttl_seconds", 600.0),
           ("sandboxes.reaper.graceSeconds", "sandbox.grace_seconds", 30.0), ("sandboxes.environment", "sandbox.environment", "host"),
           ("sandboxes.bundleSource", "sandbox.bundle_source", "volume"),
           ("sandboxes.imagePullPolicy", "sandbox.image_pull_policy", "Always"),
           ("sandboxes.warmPool.maxTotal", "sandbox.pool_max_total", 4), ("sandboxes.warmPool.maxPerImage", "sandbox.pool_max_per_image", 2),
           ("sandboxes.warmPool.idleSeconds", "sandbox.pool_idle_seconds", 900)),
)
"""Every chart value that is one service's setting as it stands (values the chart derives a setting
from, such as URLs, directories and the model's path, are the chart's own and not here)."""


def lookup(values: dict[str, Any], path: str) -> Any:  # noqa: ANN401 - a values entry
    """The entry at a dotted path; ``MISSING`` when any part is absent."""
    node: Any = values
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def service_env(values: dict[str, Any], module: str) -> dict[str, str]:
    """The env vars the chart gives ``module``'s container for ``values``: the table's, then the
    component's ``env:`` block over them."""
    env = {}
    for row in CHART_SETTINGS:
        if row.module != module:
            continue
        value = lookup(values, row.value)
        if value is MISSING or (value is None and not row.off):
            continue
        env[row.env_var()] = setting_text(value)
    block = values.get(module.removeprefix("rlstack."))
    if isinstance(block, dict):  # the env servers are a list, each with its own env: (not in the table)
        env.update({k: str(v) for k, v in (block.get("env") or {}).items()})
    return env
