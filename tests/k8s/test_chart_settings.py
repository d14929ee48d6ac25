"""The one table of chart values and the settings they become (``rlstack.ops.chart_settings``) agrees with
the chart: each row's value, set in a render, reaches its service's container as the env var that service
reads, and the service's own settings model reads it back as the value; ``rlstack dryrun`` reads the same
values through the same table to the same settings. A template that renames a variable or drops a value
fails here, and so does a row that names a setting no service has."""

from __future__ import annotations

import json
import re

import yaml

from rlstack.launcher.service_settings import SETTINGS, resolve_settings, settings_class
from rlstack.ops.chart_settings import CHART_SETTINGS, ChartSetting, lookup, service_env
from tests.k8s.conftest import CHART, render

KUBE_REF = re.compile(r"\$\((\w+)\)")
DOWNWARD = {"POD_IP": "10.0.0.1", "POD_NAME": "rl-inference-0"}
"""What the kubelet puts in for ``$(POD_IP)`` and the like, as a pod would see it."""

def container_envs(text: str) -> dict[str, dict[str, str]]:
    """Each service's container env, by the service's env prefix (the container that reads ``<PREFIX>PORT``)."""
    prefixes = {settings_class(m).model_config["env_prefix"]: m for m in SETTINGS}
    out: dict[str, dict[str, str]] = {}
    for doc in yaml.safe_load_all(text):
        spec = (doc or {}).get("spec") or {}
        template = spec.get("template") or (spec.get("jobTemplate") or {}).get("spec", {}).get("template")
        for container in (template or {}).get("spec", {}).get("containers", []):
            env = {e["name"]: KUBE_REF.sub(lambda m: DOWNWARD.get(m[1], "x-0"), e["value"])
                   for e in container.get("env", []) if e.get("value") is not None}
            for prefix, module in prefixes.items():
                if prefix + "PORT" in env:
                    out.setdefault(module, env)
    return out


def rendered_with(rows: list[ChartSetting], value_of) -> dict[str, dict[str, str]]:
    sets = [a for r in rows for a in ("--set-json", f"{r.value}={json.dumps(value_of(r))}")]
    return container_envs(render("values.yaml", *sets))


def values_with(rows: list[ChartSetting], value_of) -> dict:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for r in rows:
        *parents, leaf = r.value.split(".")
        node = values
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value_of(r)
    return values


def test_every_row_names_a_setting_its_service_has():
    for row in CHART_SETTINGS:
        assert row.field_info().default != row.example, f"{row.value}: example is the default"  # KeyError: no such setting


def test_each_chart_value_reaches_its_setting_in_the_chart_and_in_dryrun():
    rows = list(CHART_SETTINGS)
    envs = rendered_with(rows, lambda r: r.example)
    values = values_with(rows, lambda r: r.example)
    for row in rows:
        assert lookup(values, row.value) == row.example
        chart = resolve_settings(row.module, [], envs[row.module])
        dryrun = resolve_settings(row.module, [], service_env(values, row.module))
        assert row.read(chart) == row.read(dryrun) == row.example, row.value


def test_null_is_off_in_the_chart_and_in_dryrun():
    off = [r for r in CHART_SETTINGS if r.off]
    assert off, "no row has an off"
    envs = rendered_with(off, lambda r: None)
    values = values_with(off, lambda r: None)
    for row in off:
        assert envs[row.module][row.env_var()] == "null"
        assert row.read(resolve_settings(row.module, [], envs[row.module])) is None
        assert row.read(resolve_settings(row.module, [], service_env(values, row.module))) is None
